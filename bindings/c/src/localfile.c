/*
 * localfile.c: the files that omst_put_file and omst_get_file name, opened
 * by the library with the caller's rights and nobody else's (the daemon
 * only ever sees the descriptor: docs/rpcbridge.md section 6.12). The
 * rules are those of the Go package pkg/localfile, which the omst CLI uses:
 *
 *   - A path is resolved here, component by component (lstat). A symbolic
 *     link is followed only where Linux's fs.protected_symlinks = 1 would
 *     follow it, whatever the host's setting: a link in a sticky,
 *     world-writable directory (such as /tmp) only if the caller (its
 *     effective uid) or the directory's owner owns it. At most 40 links;
 *     ".." is lexical on the already resolved prefix. A link whose
 *     directory is on procfs (/dev/stdin -> /proc/self/fd/0 ends in one)
 *     names an open file, not a path: that path is opened as the kernel
 *     resolves it.
 *   - The resolved directory is opened (O_PATH|O_DIRECTORY|O_NOFOLLOW) and
 *     checked through /proc/self/fd to be the one resolved; the file is
 *     then opened, created and renamed relative to it with O_NOFOLLOW.
 *   - Read (put): anything but a directory. Opening a FIFO waits for a
 *     writer.
 *   - Write (get): an existing directory is refused; an existing file that
 *     is not regular (a FIFO, a device such as /dev/null) is written in
 *     place, except a FIFO of another user in a sticky world-writable
 *     directory (the rule of fs.protected_fifos); a regular file or a
 *     missing one gets a new temporary file beside it,
 *     ".<base>.omst-<random hex>" (the replaced file's permission bits,
 *     group where the caller is in it and, as root, owner: lf_kept_mode;
 *     or for a new file mode 0644 less the umask), renamed onto
 *     it by lf_commit and removed by lf_abort: the destination is
 *     unchanged unless the get succeeded.
 *
 * Failures are OMST_EIO with errno set (EACCES for a link or FIFO the rules
 * refuse, as the kernel's own protection reports it) and a message naming
 * the path; OMST_ENOMEM when memory runs out.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define LF_MAX_LINKS 40
#define LF_PROC_SUPER_MAGIC 0x9fa0

/* Sets errno to err and fails with OMST_EIO and the message. */
static int lf_fail(int err, const char *fmt, ...) OMST_PRINTF(2, 3);
static int lf_fail(int err, const char *fmt, ...)
{
	char msg[4096 + 512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	omst_fail_msg(0, msg, strlen(msg));
	errno = err;
	return OMST_EIO;
}

static int lf_oom(void)
{
	errno = ENOMEM;
	return omst_fail(OMST_ENOMEM, "out of memory");
}

int lf_may_follow(uid_t follower, const struct stat *link, const struct stat *dir)
{
	int sticky = (dir->st_mode & S_ISVTX) != 0;
	int world_writable = (dir->st_mode & S_IWOTH) != 0;
	if (!sticky || !world_writable)
		return 1;
	return link->st_uid == follower || link->st_uid == dir->st_uid;
}

/* ---- a growable string ------------------------------------------------ */

struct sb {
	char *p;
	size_t n, cap;
	int oom;
};

static void sb_add(struct sb *s, const char *p, size_t n)
{
	if (s->oom)
		return;
	if (s->n + n + 1 > s->cap) {
		size_t cap = (s->n + n + 1) * 2;
		char *q = realloc(s->p, cap);
		if (q == NULL) {
			s->oom = 1;
			return;
		}
		s->p = q;
		s->cap = cap;
	}
	memcpy(s->p + s->n, p, n);
	s->n += n;
	s->p[s->n] = '\0';
}

/* Appends the component c[0..n) to the path s (which has no trailing
 * slash except as "/"). */
static void sb_join(struct sb *s, const char *c, size_t n)
{
	if (!(s->n == 1 && s->p[0] == '/'))
		sb_add(s, "/", 1);
	sb_add(s, c, n);
}

/* Drops the last component of the path s, lexically ("/" stays "/"). */
static void sb_dirname(struct sb *s)
{
	if (s->oom)
		return;
	while (s->n > 1 && s->p[s->n - 1] != '/')
		s->n--;
	if (s->n > 1)
		s->n--; /* the slash, unless it is the root */
	s->p[s->n] = '\0';
}

/* 1 if p holds no more components (only slashes and "."). */
static int is_last(const char *p)
{
	for (;;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			return 1;
		if (p[0] == '.' && (p[1] == '/' || p[1] == '\0')) {
			p++;
			continue;
		}
		return 0;
	}
}

/* Appends the components of p to the path s, "." and ".." lexically. */
static void sb_append_clean(struct sb *s, const char *p)
{
	while (*p) {
		while (*p == '/')
			p++;
		const char *c = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - c);
		if (n == 0 || (n == 1 && c[0] == '.'))
			continue;
		if (n == 2 && c[0] == '.' && c[1] == '.')
			sb_dirname(s);
		else
			sb_join(s, c, n);
	}
}

/* ---- resolution --------------------------------------------------------- */

int lf_resolve(const char *path, uid_t uid, char **out)
{
	*out = NULL;
	if (path[0] != '/')
		return lf_fail(EINVAL, "resolve %s: not an absolute path", path);
	struct sb cur = {0};
	sb_add(&cur, "/", 1);
	char *rest = strdup(path);
	if (rest == NULL || cur.oom) {
		free(rest);
		free(cur.p);
		return lf_oom();
	}
	size_t pos = 0;
	int links = 0, e = 0;
	for (;;) {
		while (rest[pos] == '/')
			pos++;
		if (rest[pos] == '\0')
			break;
		const char *c = rest + pos;
		while (rest[pos] && rest[pos] != '/')
			pos++;
		size_t cl = (size_t)(rest + pos - c);
		if (cl == 1 && c[0] == '.')
			continue;
		if (cl == 2 && c[0] == '.' && c[1] == '.') {
			sb_dirname(&cur); /* cur has no links: ".." is lexical */
			continue;
		}
		size_t parent = cur.n; /* cur.p[0..parent) is the directory ("/" for the root) */
		sb_join(&cur, c, cl);
		if (cur.oom) {
			e = lf_oom();
			break;
		}
		int last = is_last(rest + pos);
		struct stat st;
		if (lstat(cur.p, &st) != 0) {
			int err = errno;
			if (err == ENOENT && last)
				break; /* where it would be created */
			e = lf_fail(err, "resolve %s: %s: %s", path, cur.p, strerror(err));
			break;
		}
		if (!S_ISLNK(st.st_mode)) {
			if (!last && !S_ISDIR(st.st_mode)) {
				e = lf_fail(ENOTDIR, "resolve %s: %s: %s", path, cur.p, strerror(ENOTDIR));
				break;
			}
			continue;
		}
		if (++links > LF_MAX_LINKS) {
			e = lf_fail(ELOOP, "resolve %s: %s", path, strerror(ELOOP));
			break;
		}
		/* The link's directory, as a string of its own. */
		char *dir = strndup(cur.p, parent);
		if (dir == NULL) {
			e = lf_oom();
			break;
		}
		struct statfs sfs;
		if (statfs(dir, &sfs) == 0 && sfs.f_type == LF_PROC_SUPER_MAGIC) {
			/* A "magic" link in /proc: the kernel's to follow. */
			free(dir);
			sb_append_clean(&cur, rest + pos);
			e = cur.oom ? lf_oom() : LF_MAGIC;
			break;
		}
		struct stat dst;
		if (stat(dir, &dst) != 0) {
			int err = errno;
			e = lf_fail(err, "resolve %s: %s: %s", path, dir, strerror(err));
			free(dir);
			break;
		}
		if (!lf_may_follow(uid, &st, &dst)) {
			e = lf_fail(EACCES,
			            "resolve %s: symbolic link not followed: %s (owner uid %u, in %s of uid %u) is in a "
			            "sticky world-writable directory and owned by another user",
			            path, cur.p, (unsigned)st.st_uid, dir, (unsigned)dst.st_uid);
			free(dir);
			break;
		}
		free(dir);
		char target[4097];
		ssize_t tl = readlink(cur.p, target, sizeof target);
		if (tl < 0 || (size_t)tl >= sizeof target) {
			int err = tl < 0 ? errno : ENAMETOOLONG;
			e = lf_fail(err, "resolve %s: readlink %s: %s", path, cur.p, strerror(err));
			break;
		}
		target[tl] = '\0';
		/* The link's target, then what came after the link. */
		if (target[0] == '/')
			cur.n = 1;
		else
			cur.n = parent;
		cur.p[cur.n] = '\0';
		size_t rl = strlen(rest + pos);
		char *next = malloc((size_t)tl + 1 + rl + 1);
		if (next == NULL) {
			e = lf_oom();
			break;
		}
		memcpy(next, target, (size_t)tl);
		next[tl] = '/';
		memcpy(next + tl + 1, rest + pos, rl + 1);
		free(rest);
		rest = next;
		pos = 0;
	}
	free(rest);
	if (e < 0) {
		free(cur.p);
		return e;
	}
	*out = cur.p;
	return e;
}

/* ---- opening ------------------------------------------------------------ */

/* Splits the resolved path real ("/a/b/c") into a malloc'd directory
 * ("/a/b") and a pointer to its last component ("c"). */
static int split(const char *real, char **dir, const char **base)
{
	const char *slash = strrchr(real, '/');
	size_t dl = slash == real ? 1 : (size_t)(slash - real);
	*dir = strndup(real, dl);
	*base = slash + 1;
	return *dir ? 0 : lf_oom();
}

/* Checks, where /proc shows it, that the open fd is the directory dir
 * (no link was swapped into the path since it was resolved). */
static int check_fd(int fd, const char *dir)
{
	char proc[64], got[4097];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(proc, got, sizeof got - 1);
	if (n < 0)
		return 0; /* no /proc: nothing to check against */
	got[n] = '\0';
	if (strcmp(got, dir) != 0)
		return lf_fail(EAGAIN, "open %s: the path changed while it was opened (it is now %s)", dir, got);
	return 0;
}

/* Opens the resolved directory dir for the *at calls and checks it. */
static int open_dir(const char *dir, int *dfd)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		return lf_fail(err, "open %s: %s", dir, strerror(err));
	}
	int e = check_fd(fd, dir);
	if (e) {
		close(fd);
		return e;
	}
	*dfd = fd;
	return 0;
}

/* openat, retried on EINTR (a FIFO's open waits for its other end). */
static int openat_retry(int dfd, const char *name, int flags, mode_t mode)
{
	int fd;
	do
		fd = openat(dfd, name, flags | O_CLOEXEC | O_NOCTTY, mode);
	while (fd < 0 && errno == EINTR);
	return fd;
}

/* Opens the FIFO base in dfd for reading or writing (flags O_RDONLY or
 * O_WRONLY, plus O_NOFOLLOW), waiting for its other end at most
 * timeout_ms (a blocking open would wait for ever): a writer's open is
 * retried while no reader has it open (ENXIO), every 1 to 50 ms; a
 * reader's returns at once and then waits (poll) until a writer's bytes
 * arrive or a writer has come and gone. The descriptor returned blocks
 * again. On timeout -1 with errno ETIMEDOUT, nothing left open. */
static int open_fifo(int dfd, const char *base, int flags, int timeout_ms)
{
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long waited = 0, step = 1;
	int fd;
	for (;;) {
		fd = openat_retry(dfd, base, flags | O_NONBLOCK, 0);
		if (fd >= 0 || errno != ENXIO || (flags & O_ACCMODE) != O_WRONLY)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		waited = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (waited >= timeout_ms) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct timespec nap = {0, (step < timeout_ms - waited ? step : timeout_ms - waited) * 1000000};
		nanosleep(&nap, NULL);
		if (step < 50)
			step *= 2;
	}
	if (fd < 0)
		return -1;
	if ((flags & O_ACCMODE) == O_RDONLY) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r;
		for (;;) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			waited = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
			int left = waited >= timeout_ms ? 0 : (int)(timeout_ms - waited);
			r = poll(&p, 1, left);
			if (r >= 0 || errno != EINTR)
				break;
		}
		if (r <= 0) {
			int err = r == 0 ? ETIMEDOUT : errno;
			close(fd);
			errno = err;
			return -1;
		}
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* The error of open_fifo: a timeout names the end that never came. */
static int fifo_fail(const char *path, int err, int flags, int timeout_ms)
{
	if (err == ETIMEDOUT)
		return lf_fail(err, "open %s: no %s opened the FIFO within %d ms", path,
		               (flags & O_ACCMODE) == O_RDONLY ? "writer" : "reader", timeout_ms);
	return lf_fail(err, "open %s: %s", path, strerror(err));
}

/* Opens real, a path through a link in /proc, as the kernel resolves it
 * (the last component is the magic link: no O_NOFOLLOW). A directory is
 * refused. A FIFO (/dev/fd/N of a named pipe) waits for its other end at
 * most timeout_ms, as a FIFO named by its own path does (open_fifo): its
 * open blocks while the other end is closed, which, for an end the caller
 * holds open itself, may be for ever. */
static int open_magic(const char *path, const char *real, int flags, int timeout_ms, int *out)
{
	struct stat st;
	if (stat(real, &st) != 0) {
		int err = errno;
		return lf_fail(err, "open %s: %s", path, strerror(err));
	}
	if (S_ISDIR(st.st_mode))
		return lf_fail(EISDIR, "open %s: %s", path, strerror(EISDIR));
	char *dir;
	const char *base;
	int e = split(real, &dir, &base);
	if (e)
		return e;
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		int err = errno;
		free(dir);
		return lf_fail(err, "open %s: %s", path, strerror(err));
	}
	free(dir);
	int fifo = S_ISFIFO(st.st_mode);
	int fd = fifo ? open_fifo(dfd, base, flags, timeout_ms) : openat_retry(dfd, base, flags, 0);
	int err = errno;
	close(dfd);
	if (fd < 0 && fifo)
		return fifo_fail(path, err, flags, timeout_ms);
	if (fd < 0)
		return lf_fail(err, "open %s: %s", path, strerror(err));
	*out = fd;
	return 0;
}

int lf_open_read(const char *path, int timeout_ms, int *out)
{
	char *real;
	int e = lf_resolve(path, geteuid(), &real);
	if (e == LF_MAGIC) {
		e = open_magic(path, real, O_RDONLY, timeout_ms, out);
		free(real);
		return e;
	}
	if (e)
		return e;
	if (strcmp(real, "/") == 0) {
		free(real);
		return lf_fail(EISDIR, "open %s: %s", path, strerror(EISDIR));
	}
	char *dir;
	const char *base;
	int dfd = -1, fd = -1;
	if ((e = split(real, &dir, &base)) != 0) {
		free(real);
		return e;
	}
	e = open_dir(dir, &dfd);
	free(dir);
	struct stat st;
	if (e == 0 && fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		int err = errno;
		e = lf_fail(err, "open %s: %s", path, strerror(err));
	}
	if (e == 0 && S_ISDIR(st.st_mode))
		e = lf_fail(EISDIR, "open %s: %s", path, strerror(EISDIR));
	if (e == 0 && S_ISFIFO(st.st_mode)) {
		if ((fd = open_fifo(dfd, base, O_RDONLY | O_NOFOLLOW, timeout_ms)) < 0)
			e = fifo_fail(path, errno, O_RDONLY, timeout_ms);
	} else if (e == 0 && (fd = openat_retry(dfd, base, O_RDONLY | O_NOFOLLOW, 0)) < 0) {
		int err = errno;
		e = lf_fail(err, "open %s: %s", path, strerror(err));
	}
	/* What was opened may differ from what was checked: a directory put
	 * there meanwhile is refused all the same. */
	if (e == 0 && (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode))) {
		close(fd);
		e = lf_fail(EISDIR, "open %s: %s", path, strerror(EISDIR));
	}
	if (dfd >= 0)
		close(dfd);
	free(real);
	if (e == 0)
		*out = fd;
	return e;
}

mode_t lf_kept_mode(mode_t old, int same_group)
{
	mode_t m = old & 0777;
	if (!same_group)
		m = (m & ~(mode_t)070) | (m & ((m & 07) << 3));
	return m;
}

/* A new name for the temporary file of a get of base: hidden, saying
 * whose it is (.BASE.omst-RANDOM, BASE cut to 200 bytes). */
static void temp_name(char *out, size_t cap, const char *base)
{
	static unsigned counter;
	unsigned char r[6];
	if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
		/* No entropy yet: the name only needs to be new (O_EXCL makes
		 * it safe), so the clock, pid and a counter do. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 20) ^
		             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
		for (size_t i = 0; i < sizeof r; i++)
			r[i] = (unsigned char)(x >> (8 * i));
	}
	snprintf(out, cap, ".%.200s.omst-%02x%02x%02x%02x%02x%02x", base, r[0], r[1], r[2], r[3], r[4], r[5]);
}

int lf_create(const char *path, int timeout_ms, struct lf_dest *d)
{
	memset(d, 0, sizeof *d);
	d->fd = d->dfd = -1;
	char *real;
	int e = lf_resolve(path, geteuid(), &real);
	if (e == LF_MAGIC) {
		/* /dev/stdout and the like: the open file behind the link,
		 * written in place. */
		e = open_magic(path, real, O_WRONLY, timeout_ms, &d->fd);
		free(real);
		return e;
	}
	if (e)
		return e;
	if (strcmp(real, "/") == 0) {
		free(real);
		return lf_fail(EISDIR, "create %s: %s", path, strerror(EISDIR));
	}
	char *dir;
	const char *base;
	if ((e = split(real, &dir, &base)) != 0) {
		free(real);
		return e;
	}
	int dfd = -1;
	e = open_dir(dir, &dfd);
	free(dir);
	if (e) {
		free(real);
		return e;
	}
	struct stat st;
	int r = fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW), err = errno;
	if (r == 0 && S_ISDIR(st.st_mode)) {
		e = lf_fail(EISDIR, "create %s: %s", path, strerror(EISDIR));
	} else if (r == 0 && !S_ISREG(st.st_mode)) {
		/* A FIFO, a device, a socket: written in place. A FIFO of
		 * another user in a sticky world-writable directory is not (the
		 * rule of fs.protected_fifos: it may be a trap). */
		struct stat dst;
		if (S_ISFIFO(st.st_mode) &&
		    (fstat(dfd, &dst) != 0 || !lf_may_follow(geteuid(), &st, &dst))) {
			e = lf_fail(EACCES,
			            "open %s: FIFO of uid %u not written: it is in a sticky world-writable directory "
			            "and owned by another user",
			            path, (unsigned)st.st_uid);
		} else if (S_ISFIFO(st.st_mode)) {
			if ((d->fd = open_fifo(dfd, base, O_WRONLY | O_NOFOLLOW, timeout_ms)) < 0)
				e = fifo_fail(path, errno, O_WRONLY, timeout_ms);
		} else if ((d->fd = openat_retry(dfd, base, O_WRONLY | O_NOFOLLOW, 0)) < 0) {
			err = errno;
			e = lf_fail(err, "open %s: %s", path, strerror(err));
		}
	} else if (r != 0 && err != ENOENT) {
		e = lf_fail(err, "create %s: %s", path, strerror(err));
	} else {
		char temp[256];
		/* A replaced file's permission bits are kept (created under the
		 * umask, never more open than it, then set exactly), with its
		 * group where the caller is in it, else the group's bits cut to
		 * the others' (lf_kept_mode), and as root its owner. */
		int keep = r == 0;
		mode_t mode = keep ? (st.st_mode & 0777) : 0644;
		for (int i = 0; i < 10; i++) {
			temp_name(temp, sizeof temp, base);
			d->fd = openat_retry(dfd, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
			if (d->fd >= 0 || errno != EEXIST)
				break;
		}
		if (d->fd >= 0 && keep) {
			struct stat now;
			int same_group = 1;
			if (fstat(d->fd, &now) != 0) {
				same_group = -1;
			} else {
				/* The owner: only root may give the file away; else
				 * (or root squashed on NFS) it stays the caller's,
				 * with the old owner's bits. */
				if (now.st_uid != st.st_uid && geteuid() == 0) {
					int r2 = fchown(d->fd, st.st_uid, (gid_t)-1);
					(void)r2;
				}
				if (now.st_gid != st.st_gid && fchown(d->fd, (uid_t)-1, st.st_gid) != 0)
					same_group = 0;
			}
			if (same_group < 0 || fchmod(d->fd, lf_kept_mode(st.st_mode, same_group)) != 0)
				keep = -1;
		}
		if (d->fd >= 0 && keep < 0) {
			int ferr = errno;
			close(d->fd);
			unlinkat(dfd, temp, 0);
			d->fd = -1;
			errno = ferr;
		}
		if (d->fd < 0) {
			/* The temporary file is an internal: the error names the
			 * destination. */
			err = errno;
			e = lf_fail(err, "create %s: %s", path, strerror(err));
		} else {
			d->regular = 1;
			d->temp = strdup(temp);
			d->base = strdup(base);
			if (d->temp == NULL || d->base == NULL) {
				unlinkat(dfd, temp, 0);
				close(d->fd);
				free(d->temp);
				free(d->base);
				d->fd = -1;
				d->regular = 0;
				e = lf_oom();
			} else {
				d->dfd = dfd;
				dfd = -1;
			}
		}
	}
	if (dfd >= 0)
		close(dfd);
	free(real);
	return e;
}

static void dest_free(struct lf_dest *d)
{
	if (d->dfd >= 0)
		close(d->dfd);
	free(d->temp);
	free(d->base);
	d->dfd = -1;
	d->temp = d->base = NULL;
	d->done = 1;
}

int lf_commit(struct lf_dest *d, const char *path)
{
	if (d->done)
		return 0;
	int fd = d->fd, e = 0;
	d->fd = -1;
	if (close(fd) != 0 && errno != EINTR) {
		int err = errno;
		e = lf_fail(err, "close %s: %s", path, strerror(err));
	}
	if (d->regular) {
		if (e == 0 && renameat(d->dfd, d->temp, d->dfd, d->base) != 0) {
			int err = errno;
			e = lf_fail(err, "rename into place %s: %s", path, strerror(err));
		}
		if (e)
			unlinkat(d->dfd, d->temp, 0);
	}
	dest_free(d);
	return e;
}

void lf_abort(struct lf_dest *d)
{
	if (d->done)
		return;
	int err = errno;
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	if (d->regular)
		unlinkat(d->dfd, d->temp, 0);
	dest_free(d);
	errno = err;
}
