/*
 * files.c: the caller's files (put_file, get_file, put_fd, get_to_fd),
 * opened by the library with the caller's rights (localfile.c) and passed
 * to the real daemon as descriptors, or streamed on a daemon older than
 * version 5 (a relay in fake.c caps the version the daemon answers).
 */
#include "harness.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1u << 20)

static omst_t *connect_or_die(const char *sock)
{
	omst_t *h = NULL;
	CHECK_RC(omst_connect(sock, &h), 0);
	if (h == NULL) {
		t_fail(__FILE__, __LINE__, "cannot go on without a connection to %s", sock);
		exit(1);
	}
	return h;
}

static int wfile(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	ssize_t w = n ? write(fd, p, n) : 0;
	return close(fd) == 0 && w == (ssize_t)n ? 0 : -1;
}

/* The file's bytes (malloc'd) and count, or NULL. */
static uint8_t *rfile(const char *path, size_t *n)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	struct stat st;
	fstat(fd, &st);
	uint8_t *p = malloc((size_t)st.st_size + 1);
	*n = 0;
	ssize_t r;
	while ((r = read(fd, p + *n, (size_t)st.st_size + 1 - *n)) > 0)
		*n += (size_t)r;
	close(fd);
	return p;
}

/* 1 if path holds exactly p[0..n). */
static int holds(const char *path, const void *p, size_t n)
{
	size_t got;
	uint8_t *b = rfile(path, &got);
	int ok = b != NULL && got == n && memcmp(b, p, n) == 0;
	free(b);
	return ok;
}

/* Entries of dir whose name has ".omst-" (temporary files of gets). */
static int temps_in(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (strstr(e->d_name, ".omst-"))
			n++;
	closedir(d);
	return n;
}

static int is_symlink(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* A fresh directory in the scratch directory. */
static void scratch_dir(char *out, size_t cap, const char *what)
{
	static int seq;
	snprintf(out, cap, "%s/%s-%d-%d", t_tmp, what, (int)getpid(), seq++);
	if (mkdir(out, 0755) != 0)
		t_fail(__FILE__, __LINE__, "mkdir %s: %s", out, strerror(errno));
}

/* ---- threads at the other end of a pipe or FIFO ------------------------- */

struct pipe_end {
	char path[800]; /* a FIFO to open, or "" to use fd */
	int fd;
	const uint8_t *data; /* writer: the bytes to write */
	size_t n;
	uint8_t *got; /* reader: the bytes read (malloc'd) */
	size_t got_n;
	pthread_t th;
};

static void *writer_main(void *arg)
{
	struct pipe_end *p = arg;
	int fd = p->path[0] ? open(p->path, O_WRONLY) : p->fd;
	for (size_t off = 0; fd >= 0 && off < p->n;) {
		size_t k = p->n - off < 65536 ? p->n - off : 65536;
		ssize_t r = write(fd, p->data + off, k);
		if (r <= 0)
			break;
		off += (size_t)r;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct pipe_end *p = arg;
	int fd = p->path[0] ? open(p->path, O_RDONLY) : p->fd;
	size_t cap = 1 << 16;
	p->got = malloc(cap);
	p->got_n = 0;
	for (;;) {
		if (p->got_n == cap)
			p->got = realloc(p->got, cap *= 2);
		ssize_t r = fd >= 0 ? read(fd, p->got + p->got_n, cap - p->got_n) : 0;
		if (r <= 0)
			break;
		p->got_n += (size_t)r;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* ---- resolution and the link rule (no daemon) ------------------------------ */

void test_file_resolve(void)
{
	char d[512], p[1200], want[1200];
	scratch_dir(d, sizeof d, "resolve");
	char *real = NULL;
	snprintf(p, sizeof p, "%s/a", d);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/a/b", d);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/a/b/f", d);
	CHECK(wfile(p, "x", 1) == 0);
	struct {
		const char *link, *target;
	} links[] = {{"lb", "a/b"}, {"lf", NULL}, {"llf", "lf"}, {"dangling", "missing"},
	             {"loop1", "loop2"}, {"loop2", "loop1"}, {"a/b/dotdot", "../b/../../a/b/f"}};
	for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
		char l[1200], t[1200];
		snprintf(l, sizeof l, "%s/%s", d, links[i].link);
		if (links[i].target)
			snprintf(t, sizeof t, "%s", links[i].target);
		else
			snprintf(t, sizeof t, "%s/a/b/f", d); /* absolute */
		CHECK(symlink(t, l) == 0);
	}
	struct {
		const char *in, *want;
	} ok[] = {{"/a/b/f", "/a/b/f"},   {"/lb/f", "/a/b/f"},          {"/lf", "/a/b/f"},
	          {"/llf", "/a/b/f"},     {"/lb/../b/./f", "/a/b/f"},   {"//a///b/f", "/a/b/f"},
	          {"/lb/new", "/a/b/new"}, {"/dangling", "/missing"},    {"/a/b/dotdot", "/a/b/f"},
	          {"/a/b/f/", "/a/b/f"},   {"/a/../a/./b/f", "/a/b/f"}};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
		snprintf(p, sizeof p, "%s%s", d, ok[i].in);
		snprintf(want, sizeof want, "%s%s", d, ok[i].want);
		int r = lf_resolve(p, geteuid(), &real);
		if (r != 0 || real == NULL || strcmp(real, want) != 0)
			t_fail(__FILE__, __LINE__, "lf_resolve(%s) = %d \"%s\" (%s), want %s", p, r, real ? real : "",
			       omst_errmsg(), want);
		free(real);
	}
	struct {
		const char *in;
		int err;
	} bad[] = {{"/loop1", ELOOP}, {"/nodir/f", ENOENT}, {"/a/b/f/g", ENOTDIR}};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(p, sizeof p, "%s%s", d, bad[i].in);
		errno = 0;
		int r = lf_resolve(p, geteuid(), &real);
		if (r != OMST_EIO || errno != bad[i].err || real != NULL)
			t_fail(__FILE__, __LINE__, "lf_resolve(%s) = %d errno %d (%s), want OMST_EIO errno %d", p, r, errno,
			       omst_errmsg(), bad[i].err);
		else
			CHECK(strstr(omst_errmsg(), p) != NULL);
	}
	CHECK(lf_resolve("/", geteuid(), &real) == 0 && real && strcmp(real, "/") == 0);
	free(real);
	/* A link in /proc is the kernel's: /dev/fd/N -> /proc/self/fd/N. */
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	snprintf(p, sizeof p, "/dev/fd/%d", pfd[0]);
	snprintf(want, sizeof want, "/proc/self/fd/%d", pfd[0]);
	int r = lf_resolve(p, geteuid(), &real);
	if (r != LF_MAGIC || real == NULL || strcmp(real, want) != 0)
		t_fail(__FILE__, __LINE__, "lf_resolve(%s) = %d \"%s\", want LF_MAGIC %s", p, r, real ? real : "", want);
	free(real);
	close(pfd[0]);
	close(pfd[1]);
}

void test_file_may_follow(void)
{
	const uid_t me = 1000, other = 2000, owner = 3000;
	struct stat link, sticky_ww, plain_ww, sticky_priv;
	memset(&link, 0, sizeof link);
	memset(&sticky_ww, 0, sizeof sticky_ww);
	sticky_ww.st_mode = S_IFDIR | S_ISVTX | 0777;
	sticky_ww.st_uid = owner;
	plain_ww = sticky_ww;
	plain_ww.st_mode = S_IFDIR | 0777;
	sticky_priv = sticky_ww;
	sticky_priv.st_mode = S_IFDIR | S_ISVTX | 0755;
	struct {
		uid_t link;
		const struct stat *dir;
		int want;
	} cases[] = {
	    {me, &sticky_ww, 1},     /* one's own link */
	    {owner, &sticky_ww, 1},  /* the directory owner's link */
	    {other, &sticky_ww, 0},  /* a link planted in /tmp */
	    {other, &plain_ww, 1},   /* not sticky: the kernel follows */
	    {other, &sticky_priv, 1} /* not world-writable */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		link.st_uid = cases[i].link;
		if (lf_may_follow(me, &link, cases[i].dir) != cases[i].want)
			t_fail(__FILE__, __LINE__, "case %zu: lf_may_follow(link of %u, dir %o of %u) != %d", i,
			       (unsigned)cases[i].link, (unsigned)cases[i].dir->st_mode, (unsigned)cases[i].dir->st_uid,
			       cases[i].want);
	}
}

/* ---- round trips with the real daemon ---------------------------------- */

void test_file_roundtrip(void)
{
	omst_t *h = connect_or_die(t_sock);
	char d[512], in[700], out[700], nm[256];
	scratch_dir(d, sizeof d, "rt");
	snprintf(in, sizeof in, "%s/in", d);
	snprintf(out, sizeof out, "%s/out", d);
	size_t sizes[] = {0, 1, 4096, MiB + 1, 3 * MiB + 5};
	omst_info_t pi, gi;
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		size_t n = sizes[i];
		uint8_t *data = t_pattern(n, 300 + (uint32_t)i);
		CHECK(wfile(in, data, n) == 0);
		strcpy(nm, t_name("files/rt"));
		CHECK_RC(omst_put_file(h, nm, in, &pi), 0);
		CHECK_EQ_U(pi.size, n);
		unlink(out);
		CHECK_RC(omst_get_file(h, nm, out, &gi), 0);
		CHECK(strcmp(gi.id, pi.id) == 0);
		CHECK_EQ_U(gi.size, n);
		if (!holds(out, data, n))
			t_fail(__FILE__, __LINE__, "size %zu: %s does not hold the blob", n, out);
		free(data);
	}

	/* A new file has mode 0644 less the umask. */
	mode_t old = umask(027);
	unlink(out);
	CHECK_RC(omst_get_file(h, nm, out, NULL), 0);
	struct stat st;
	CHECK(stat(out, &st) == 0 && (st.st_mode & 07777) == 0640);
	umask(old);

	/* An existing file is replaced atomically: a new inode, and a reader
	 * of the old one keeps the old bytes. */
	CHECK(wfile(out, "hello", 5) == 0);
	int rd = open(out, O_RDONLY);
	struct stat before;
	fstat(rd, &before);
	CHECK_RC(omst_put(h, "files/rt/world", "world!", 6, NULL), 0);
	CHECK_RC(omst_get_file(h, "files/rt/world", out, NULL), 0);
	CHECK(holds(out, "world!", 6));
	char old5[8] = {0};
	CHECK(read(rd, old5, sizeof old5) == 5 && memcmp(old5, "hello", 5) == 0);
	close(rd);
	CHECK(stat(out, &st) == 0 && st.st_ino != before.st_ino);

	/* The replacement keeps the replaced file's permission bits: a
	 * private file stays private, one wider than the umask keeps them. */
	old = umask(027);
	mode_t perms[] = {0600, 0664};
	for (int i = 0; i < 2; i++) {
		CHECK(chmod(out, perms[i]) == 0);
		CHECK_RC(omst_get_file(h, "files/rt/world", out, NULL), 0);
		CHECK(stat(out, &st) == 0 && (st.st_mode & 07777) == perms[i]);
	}
	umask(old);

	/* And its group where the caller may give it (root: any; else one of
	 * its supplementary groups), and as root its owner: a 0640 file of
	 * group G came back of the caller's group, 0640, readable by that
	 * group's users. */
	gid_t other = 0;
	int have_other = 0;
	uid_t owner = geteuid();
	if (geteuid() == 0) {
		other = 4242, have_other = 1, owner = 4343;
	} else {
		gid_t gs[64];
		int ng = getgroups(64, gs);
		for (int i = 0; i < ng && !have_other; i++)
			if (gs[i] != getegid())
				other = gs[i], have_other = 1;
	}
	if (have_other) {
		CHECK(chown(out, owner, other) == 0 && chmod(out, 0640) == 0);
		CHECK_RC(omst_get_file(h, "files/rt/world", out, NULL), 0);
		CHECK(stat(out, &st) == 0);
		CHECK_EQ_U(st.st_mode & 07777, 0640);
		CHECK_EQ_U(st.st_gid, other);
		CHECK_EQ_U(st.st_uid, owner);
	}
	/* Where the group cannot be kept, its bits are cut to the others'. */
	CHECK_EQ_U(lf_kept_mode(S_IFREG | 0640, 1), 0640);
	CHECK_EQ_U(lf_kept_mode(04755, 1), 0755);
	CHECK_EQ_U(lf_kept_mode(0640, 0), 0600);
	CHECK_EQ_U(lf_kept_mode(0674, 0), 0644);
	CHECK_EQ_U(lf_kept_mode(0661, 0), 0601);

	/* Through one's own link: the target is replaced, the link stays;
	 * and put_file reads through it. */
	char link[700];
	snprintf(link, sizeof link, "%s/link", d);
	CHECK(symlink("out", link) == 0);
	CHECK_RC(omst_put(h, "files/rt/via", "via link", 8, NULL), 0);
	CHECK_RC(omst_get_file(h, "files/rt/via", link, NULL), 0);
	CHECK(holds(out, "via link", 8));
	CHECK(is_symlink(link));
	CHECK_RC(omst_put_file(h, "files/rt/from-link", link, &pi), 0);
	CHECK_EQ_U(pi.size, 8);

	/* The OmniStorage calls, with a relative path. */
	setenv("OMST_SOCKET", t_sock, 1);
	CHECK(chdir(d) == 0);
	CHECK_RC(OmstPutFile("files/rt/omni", "out"), 0);
	CHECK_RC(OmstGetFile("files/rt/omni", "omni-out"), 0);
	CHECK(holds("omni-out", "via link", 8));
	CHECK_EQ_U(temps_in(d), 0);
	omst_close(h);
}

/* A get that fails leaves the destination as it was and no temporary
 * file; paths the rules refuse fail before anything is sent. */
void test_file_failures(void)
{
	omst_t *h = connect_or_die(t_sock);
	char d[512], out[700], p[800];
	scratch_dir(d, sizeof d, "fail");
	snprintf(out, sizeof out, "%s/out", d);
	CHECK(wfile(out, "precious", 8) == 0);
	omst_info_t info;
	CHECK_RC(omst_stat(h, "files/no/such/name", &info), OMST_ENOTFOUND); /* the pool warm */
	int fds0 = t_count_fds();
	CHECK_RC(omst_get_file(h, "files/no/such/name", out, &info), OMST_ENOTFOUND);
	CHECK(strstr(omst_errmsg(), out) != NULL);
	CHECK(holds(out, "precious", 8));
	CHECK_EQ_U(temps_in(d), 0);

	/* A missing one stays missing. */
	snprintf(p, sizeof p, "%s/new", d);
	CHECK_RC(omst_get_file(h, "files/no/such/name", p, &info), OMST_ENOTFOUND);
	CHECK(access(p, F_OK) != 0);
	CHECK_EQ_U(temps_in(d), 0);

	/* The library's own refusals: OMST_EIO with errno and the path. */
	CHECK_RC(omst_put(h, "files/fail/x", "x", 1, NULL), 0);
	errno = 0;
	CHECK_RC(omst_get_file(h, "files/fail/x", d, NULL), OMST_EIO);
	CHECK(errno == EISDIR);
	CHECK(strstr(omst_errmsg(), d) != NULL);
	snprintf(p, sizeof p, "%s/nodir/out", d);
	errno = 0;
	CHECK_RC(omst_get_file(h, "files/fail/x", p, NULL), OMST_EIO);
	CHECK(errno == ENOENT);
	errno = 0;
	CHECK_RC(omst_put_file(h, "files/fail/dir", d, NULL), OMST_EIO);
	CHECK(errno == EISDIR);
	CHECK_RC(omst_stat(h, "files/fail/dir", &info), OMST_ENOTFOUND);
	snprintf(p, sizeof p, "%s/missing", d);
	errno = 0;
	CHECK_RC(omst_put_file(h, "files/fail/missing", p, NULL), OMST_EIO);
	CHECK(errno == ENOENT);
	CHECK(strstr(omst_errmsg(), p) != NULL);
	CHECK_EQ_U(temps_in(d), 0);
	/* the handle still works, and no descriptor was left open */
	CHECK_RC(omst_get_file(h, "files/fail/x", out, NULL), 0);
	CHECK(holds(out, "x", 1));
	CHECK_EQ_U(t_count_fds(), fds0);
	omst_close(h);
}

/* A FIFO whose other end never comes: a get into it and a put from it
 * fail within the handle's timeout (OMST_TIMEOUT_MS), naming the end that
 * is missing; nothing is left open, and the handle still works. */
void test_fifo_bounded(void)
{
	setenv("OMST_TIMEOUT_MS", "300", 1);
	omst_t *h = connect_or_die(t_sock);
	unsetenv("OMST_TIMEOUT_MS");
	char d[512], fifo[700], nm[256];
	scratch_dir(d, sizeof d, "fifobound");
	strcpy(nm, t_name("files/fifobound"));
	CHECK_RC(omst_put(h, nm, "abc", 3, NULL), 0);
	snprintf(fifo, sizeof fifo, "%s/fifo", d);
	CHECK(mkfifo(fifo, 0600) == 0);
	int fds0 = t_count_fds();
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_RC(omst_get_file(h, nm, fifo, NULL), OMST_EIO);
	CHECK(errno == ETIMEDOUT);
	CHECK(strstr(omst_errmsg(), "no reader") != NULL);
	CHECK_RC(omst_put_file(h, t_name("files/fifobound/in"), fifo, NULL), OMST_EIO);
	CHECK(errno == ETIMEDOUT);
	CHECK(strstr(omst_errmsg(), "no writer") != NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(took >= 0.55 && took < 5);
	CHECK(t_count_fds() == fds0);
	CHECK_EQ_U(temps_in(d), 0);

	/* The same FIFO named by /dev/fd/N, an end the caller holds whose
	 * other end has gone: opening it again waits for the other end as
	 * the FIFO's own path does (the open blocked for ever before). */
	char dev[64];
	int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
	int wfd = open(fifo, O_WRONLY);
	CHECK(rfd >= 0 && wfd >= 0);
	close(rfd);
	fds0 = t_count_fds();
	snprintf(dev, sizeof dev, "/dev/fd/%d", wfd);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_RC(omst_get_file(h, nm, dev, NULL), OMST_EIO);
	CHECK(errno == ETIMEDOUT);
	CHECK(strstr(omst_errmsg(), "no reader") != NULL && strstr(omst_errmsg(), dev) != NULL);
	close(wfd);
	rfd = open(fifo, O_RDONLY | O_NONBLOCK);
	CHECK(rfd >= 0);
	snprintf(dev, sizeof dev, "/dev/fd/%d", rfd);
	CHECK_RC(omst_put_file(h, t_name("files/fifobound/devfd"), dev, NULL), OMST_EIO);
	CHECK(errno == ETIMEDOUT);
	CHECK(strstr(omst_errmsg(), "no writer") != NULL);
	close(rfd);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(took >= 0.55 && took < 5);
	CHECK(t_count_fds() == fds0 - 1);
	omst_info_t info;
	CHECK_RC(omst_stat(h, nm, &info), 0);
	CHECK_EQ_U(info.size, 3);
	omst_close(h);
}

/* FIFOs, devices and /dev/fd: written and read in place. */
void test_file_in_place(void)
{
	omst_t *h = connect_or_die(t_sock);
	char d[512], fifo[700], nm[256];
	scratch_dir(d, sizeof d, "inplace");
	size_t n = 2 * MiB + 3;
	uint8_t *data = t_pattern(n, 310);
	strcpy(nm, t_name("files/inplace"));
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);

	/* /dev/null stays /dev/null. */
	omst_info_t info;
	CHECK_RC(omst_get_file(h, nm, "/dev/null", &info), 0);
	CHECK_EQ_U(info.size, n);
	struct stat st;
	CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));

	/* A FIFO: the reader gets the bytes, the FIFO stays. */
	snprintf(fifo, sizeof fifo, "%s/fifo", d);
	CHECK(mkfifo(fifo, 0600) == 0);
	struct pipe_end rd;
	memset(&rd, 0, sizeof rd);
	snprintf(rd.path, sizeof rd.path, "%s", fifo);
	pthread_create(&rd.th, NULL, reader_main, &rd);
	CHECK_RC(omst_get_file(h, nm, fifo, NULL), 0);
	pthread_join(rd.th, NULL);
	CHECK(rd.got_n == n && memcmp(rd.got, data, n) == 0);
	free(rd.got);
	CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
	CHECK_EQ_U(temps_in(d), 0);

	/* put_file of a FIFO: read to its end of file. */
	struct pipe_end wr;
	memset(&wr, 0, sizeof wr);
	snprintf(wr.path, sizeof wr.path, "%s", fifo);
	wr.data = data;
	wr.n = n;
	pthread_create(&wr.th, NULL, writer_main, &wr);
	char nm2[256];
	strcpy(nm2, t_name("files/inplace/fromfifo"));
	CHECK_RC(omst_put_file(h, nm2, fifo, &info), 0);
	pthread_join(wr.th, NULL);
	CHECK_EQ_U(info.size, n);
	uint8_t *got = malloc(n);
	CHECK_RC(omst_get(h, nm2, got, n, NULL), 0);
	CHECK(memcmp(got, data, n) == 0);

	/* /dev/fd/N names the caller's own open files (links in /proc). */
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	memset(&wr, 0, sizeof wr);
	wr.fd = pfd[1];
	wr.data = data;
	wr.n = 1000;
	pthread_create(&wr.th, NULL, writer_main, &wr);
	char dev[64];
	snprintf(dev, sizeof dev, "/dev/fd/%d", pfd[0]);
	strcpy(nm2, t_name("files/inplace/devfd"));
	CHECK_RC(omst_put_file(h, nm2, dev, &info), 0);
	close(pfd[0]);
	pthread_join(wr.th, NULL);
	CHECK_EQ_U(info.size, 1000);
	CHECK(pipe(pfd) == 0);
	memset(&rd, 0, sizeof rd);
	rd.fd = pfd[0];
	pthread_create(&rd.th, NULL, reader_main, &rd);
	snprintf(dev, sizeof dev, "/dev/fd/%d", pfd[1]);
	CHECK_RC(omst_get_file(h, nm2, dev, NULL), 0);
	close(pfd[1]);
	pthread_join(rd.th, NULL);
	CHECK(rd.got_n == 1000 && memcmp(rd.got, data, 1000) == 0);
	free(rd.got);
	free(got);
	free(data);
	omst_close(h);
}

/* omst_put_fd and omst_get_to_fd on pipes and regular files, and their
 * argument checks. h talks to the real daemon, directly or through a
 * relay that caps the version (the streamed fallback). */
static void fd_calls(omst_t *h)
{
	char d[512], p[700], nm[256];
	scratch_dir(d, sizeof d, "fdcalls");
	size_t n = 3 * MiB + 17;
	uint8_t *data = t_pattern(n, 320);
	omst_info_t info;

	CHECK_RC(omst_stat(h, "files/fd/none", &info), OMST_ENOTFOUND); /* the pool warm */
	int fds0 = t_count_fds();

	/* put_fd from a pipe, get_to_fd into a pipe */
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	struct pipe_end wr = {.fd = pfd[1], .data = data, .n = n};
	pthread_create(&wr.th, NULL, writer_main, &wr);
	strcpy(nm, t_name("files/fd/pipe"));
	CHECK_RC(omst_put_fd(h, nm, pfd[0], &info), 0);
	close(pfd[0]); /* (if the put failed, the writer ends: SIGPIPE fails the test) */
	pthread_join(wr.th, NULL);
	CHECK_EQ_U(info.size, n);
	CHECK(pipe(pfd) == 0);
	struct pipe_end rd = {.fd = pfd[0]};
	pthread_create(&rd.th, NULL, reader_main, &rd);
	memset(&info, 0, sizeof info);
	CHECK_RC(omst_get_to_fd(h, nm, pfd[1], &info), 0);
	CHECK_EQ_U(info.size, n);
	CHECK(info.flags & OMST_INFO_LOCAL);
	CHECK(fcntl(pfd[1], F_GETFL) >= 0); /* still open, the caller's */
	CHECK((fcntl(pfd[1], F_GETFL) & O_NONBLOCK) == 0);
	close(pfd[1]);
	pthread_join(rd.th, NULL);
	CHECK(rd.got_n == n && memcmp(rd.got, data, n) == 0);
	free(rd.got);

	/* A regular file from its offset to its size; the offset moves. */
	snprintf(p, sizeof p, "%s/in", d);
	CHECK(wfile(p, data, n) == 0);
	int fd = open(p, O_RDONLY);
	CHECK(lseek(fd, 100, SEEK_SET) == 100);
	strcpy(nm, t_name("files/fd/offset"));
	CHECK_RC(omst_put_fd(h, nm, fd, &info), 0);
	CHECK_EQ_U(info.size, n - 100);
	CHECK_EQ_U(lseek(fd, 0, SEEK_CUR), n);
	close(fd);

	/* Into a regular file longer than the blob, at some offset: exactly
	 * the blob afterwards. */
	snprintf(p, sizeof p, "%s/out", d);
	uint8_t *junk = t_pattern(n + 5000, 321);
	CHECK(wfile(p, junk, n + 5000) == 0);
	fd = open(p, O_RDWR);
	lseek(fd, 77, SEEK_SET);
	CHECK_RC(omst_get_to_fd(h, nm, fd, NULL), 0);
	close(fd);
	CHECK(holds(p, data + 100, n - 100));
	/* O_APPEND: after what is there. */
	CHECK(wfile(p, "head:", 5) == 0);
	fd = open(p, O_WRONLY | O_APPEND);
	CHECK_RC(omst_put(h, "files/fd/tail", "tail", 4, NULL), 0);
	CHECK_RC(omst_get_to_fd(h, "files/fd/tail", fd, NULL), 0);
	close(fd);
	CHECK(holds(p, "head:tail", 9));

	/* Descriptors that cannot serve: OMST_EINVAL, nothing sent. */
	int ro = open(p, O_RDONLY), wo = open(p, O_WRONLY), dir = open(d, O_RDONLY | O_DIRECTORY),
	    opath = open(p, O_PATH), closed = dup(ro);
	close(closed);
	CHECK_RC(omst_put_fd(h, "files/fd/bad", -1, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, "files/fd/bad", closed, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, "files/fd/bad", wo, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, "files/fd/bad", dir, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, "files/fd/bad", opath, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_to_fd(h, "files/fd/tail", ro, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_to_fd(h, "files/fd/tail", dir, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_to_fd(h, "files/fd/tail", -3, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(NULL, "files/fd/bad", ro, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_to_fd(NULL, "files/fd/tail", wo, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, NULL, ro, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_fd(h, "a//b", ro, NULL), OMST_EINVALIDNAME);
	CHECK_RC(omst_get_to_fd(h, "/a", wo, NULL), OMST_EINVALIDNAME);
	CHECK_RC(omst_stat(h, "files/fd/bad", &info), OMST_ENOTFOUND);
	CHECK_RC(omst_get_to_fd(h, "files/fd/no/such", wo, NULL), OMST_ENOTFOUND);
	close(ro);
	close(wo);
	close(dir);
	close(opath);

	/* get_to_fd into a pipe whose reader went away: an error, no SIGPIPE
	 * (the runner's SIGPIPE is the default action: it would kill us). */
	CHECK(pipe(pfd) == 0);
	close(pfd[0]);
	strcpy(nm, t_name("files/fd/big"));
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
	int r = omst_get_to_fd(h, nm, pfd[1], NULL);
	CHECK(r != 0 && r != OMST_EPROTO);
	close(pfd[1]);
	/* and the handle goes on, with no descriptor left open */
	CHECK_RC(omst_stat(h, nm, &info), 0);
	CHECK_EQ_U(t_count_fds(), fds0);
	free(junk);
	free(data);
}

void test_fd_calls(void)
{
	omst_t *h = connect_or_die(t_sock);
	fd_calls(h);
	omst_close(h);
}

/* relay in fake.c: a relay to the real daemon that answers at most
 * version max (it rewrites the client's HELLO). */
struct vrelay;
struct vrelay *vrelay_start(uint32_t max);
const char *vrelay_path(struct vrelay *r);
void vrelay_hold(struct vrelay *r, size_t after); /* stop reading the client after that many bytes */
void vrelay_release(struct vrelay *r);
size_t vrelay_forwarded(struct vrelay *r);
int vrelay_version_seen(struct vrelay *r); /* the version the client asked for last */
void vrelay_stop(struct vrelay *r);

struct grow {
	struct vrelay *r;
	const char *path;
	size_t at;
};

/* Waits until the relay holds the upload, appends to the file, releases. */
static void *grow_main(void *arg)
{
	struct grow *g = arg;
	double end = t_now() + 30;
	while (vrelay_forwarded(g->r) < g->at && t_now() < end)
		usleep(1000);
	usleep(50000);
	int fd = open(g->path, O_WRONLY | O_APPEND);
	if (fd < 0 || write(fd, "more", 4) != 4)
		t_fail(__FILE__, __LINE__, "append to %s: %s", g->path, strerror(errno));
	if (fd >= 0)
		close(fd);
	vrelay_release(g->r);
	return NULL;
}

/* The same calls on a daemon that answers version 4: the library streams
 * the files itself (PUT, GET). */
void test_file_fallback(void)
{
	struct vrelay *r = vrelay_start(4);
	if (r == NULL)
		return;
	omst_t *h = connect_or_die(vrelay_path(r));
	CHECK_EQ_U(vrelay_version_seen(r), OMST_PROTOCOL_VERSION);
	fd_calls(h);

	char d[512], in[700], out[700], nm[256];
	scratch_dir(d, sizeof d, "fallback");
	snprintf(in, sizeof in, "%s/in", d);
	snprintf(out, sizeof out, "%s/out", d);
	size_t n = 5 * MiB + 1;
	uint8_t *data = t_pattern(n, 330);
	CHECK(wfile(in, data, n) == 0);
	CHECK(wfile(out, "precious", 8) == 0);
	strcpy(nm, t_name("files/fallback"));
	omst_info_t info;
	CHECK_RC(omst_put_file(h, nm, in, &info), 0);
	CHECK_EQ_U(info.size, n);
	CHECK_RC(omst_get_file(h, "files/fallback/missing", out, NULL), OMST_ENOTFOUND);
	CHECK(holds(out, "precious", 8));
	CHECK_RC(omst_get_file(h, nm, out, NULL), 0);
	CHECK(holds(out, data, n));
	CHECK_EQ_U(temps_in(d), 0);
	omst_close(h);
	vrelay_stop(r);

	/* A regular file that grows while the library streams it: the put is
	 * aborted (no name), OMST_EIO "file changed". The relay stops reading
	 * 2 MiB into the upload; the file grows; the relay goes on. */
	size_t big = 32 * MiB;
	uint8_t *bigdata = t_pattern(big, 331);
	CHECK(wfile(in, bigdata, big) == 0);
	r = vrelay_start(4);
	if (r == NULL)
		return;
	h = connect_or_die(vrelay_path(r));
	size_t base = vrelay_forwarded(r);
	vrelay_hold(r, base + 2 * MiB);
	struct grow g = {r, in, base + 2 * MiB};
	pthread_t th;
	pthread_create(&th, NULL, grow_main, &g);
	strcpy(nm, t_name("files/fallback/grows"));
	int rc = omst_put_file(h, nm, in, &info);
	pthread_join(th, NULL);
	CHECK_RC(rc, OMST_EIO);
	CHECK(strstr(omst_errmsg(), "file changed while it was read") != NULL);
	CHECK(strstr(omst_errmsg(), in) != NULL);
	CHECK_RC(omst_stat(h, nm, &info), OMST_ENOTFOUND);
	omst_close(h);
	vrelay_stop(r);
	free(bigdata);
	free(data);
}

/* ---- other users' links and files (root) ---------------------------------- */

/* A sticky world-writable directory (like /tmp) with links and a FIFO that
 * another user (uid 54321) planted: neither followed nor written, for a
 * get or a put, as the last component or as a directory on the way; a
 * link of one's own there is followed. */
void test_file_planted(void)
{
	if (geteuid() != 0) {
		t_skip("needs root, to give links to another user (the CI runs the tests as root)");
		return;
	}
	omst_t *h = connect_or_die(t_sock);
	char d[512], tmp[700], victim[700], out[800], evil[800], p[900], fifo[800], mine[800];
	scratch_dir(d, sizeof d, "planted");
	snprintf(tmp, sizeof tmp, "%s/tmp", d);
	CHECK(mkdir(tmp, 0777) == 0 && chmod(tmp, 01777) == 0);
	snprintf(victim, sizeof victim, "%s/victim", d);
	CHECK(wfile(victim, "precious", 8) == 0);
	snprintf(out, sizeof out, "%s/out", tmp);
	snprintf(evil, sizeof evil, "%s/evil", tmp);
	CHECK(symlink(victim, out) == 0 && lchown(out, 54321, 54321) == 0);
	CHECK(symlink(d, evil) == 0 && lchown(evil, 54321, 54321) == 0);
	CHECK_RC(omst_put(h, "files/planted/blob", "attacker's bytes", 16, NULL), 0);

	errno = 0;
	CHECK_RC(omst_get_file(h, "files/planted/blob", out, NULL), OMST_EIO);
	CHECK(errno == EACCES);
	CHECK(strstr(omst_errmsg(), "symbolic link not followed") != NULL);
	snprintf(p, sizeof p, "%s/victim", evil);
	CHECK_RC(omst_get_file(h, "files/planted/blob", p, NULL), OMST_EIO);
	CHECK(errno == EACCES);
	CHECK_RC(omst_put_file(h, "files/planted/read", out, NULL), OMST_EIO);
	CHECK(errno == EACCES);
	CHECK_RC(omst_put_file(h, "files/planted/read", p, NULL), OMST_EIO);
	omst_info_t info;
	CHECK_RC(omst_stat(h, "files/planted/read", &info), OMST_ENOTFOUND);
	CHECK(holds(victim, "precious", 8));
	CHECK(is_symlink(out) && is_symlink(evil));
	CHECK_EQ_U(temps_in(tmp), 0);
	CHECK_EQ_U(temps_in(d), 0);

	/* Another user's FIFO there is not opened (it would wait for a reader:
	 * the test's alarm would end it). */
	snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
	CHECK(mkfifo(fifo, 0666) == 0 && chown(fifo, 54321, 54321) == 0);
	errno = 0;
	CHECK_RC(omst_get_file(h, "files/planted/blob", fifo, NULL), OMST_EIO);
	CHECK(errno == EACCES);

	/* One's own link in the same directory is followed. */
	snprintf(mine, sizeof mine, "%s/mine", tmp);
	CHECK(symlink(victim, mine) == 0);
	CHECK_RC(omst_get_file(h, "files/planted/blob", mine, NULL), 0);
	CHECK(holds(victim, "attacker's bytes", 16));
	CHECK(is_symlink(mine));
	omst_close(h);
}

/* A user other than the daemon's (uid 65534, a member of the socket's
 * group) puts a file only it can read and gets into a directory only it
 * can write: the library opens them with that user's rights and passes
 * descriptors (the daemon refuses PUT_FILE and GET_FILE to it: FORBIDDEN).
 * What only root can read it cannot put, and where only root can write it
 * cannot get. */
void test_file_other_user(void)
{
	if (geteuid() != 0) {
		t_skip("needs root, to run a daemon and a client of different users");
		return;
	}
	const uid_t uid = 65534;
	const gid_t gid = 65534;
	char gidstr[16];
	snprintf(gidstr, sizeof gidstr, "%u", (unsigned)gid);
	const char *extra[] = {"--socket-group", gidstr, NULL};
	struct t_daemon dm;
	if (t_daemon_start_with(&dm, extra) != 0) {
		t_fail(__FILE__, __LINE__, "cannot start a daemon with --socket-group %s", gidstr);
		return;
	}
	/* The user's own directory (t_tmp is root's, 0700). */
	char ud[] = "/tmp/omst-ctest-user-XXXXXX";
	CHECK(mkdtemp(ud) != NULL && chown(ud, uid, gid) == 0 && chmod(ud, 0700) == 0);
	char in[128], out[128], secret[700], rootdir[700];
	snprintf(in, sizeof in, "%s/in", ud);
	snprintf(out, sizeof out, "%s/out", ud);
	size_t n = MiB + 7;
	uint8_t *data = t_pattern(n, 340);
	CHECK(wfile(in, data, n) == 0 && chown(in, uid, gid) == 0 && chmod(in, 0600) == 0);
	/* root's: a file only root reads, a directory only root writes */
	snprintf(secret, sizeof secret, "%s/secret-%d", "/tmp", (int)getpid());
	CHECK(wfile(secret, "root only", 9) == 0 && chmod(secret, 0600) == 0);
	scratch_dir(rootdir, sizeof rootdir, "rootonly");
	CHECK(chmod(t_tmp, 0711) == 0); /* the user may pass through, not list */

	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
			fprintf(stderr, "    other_user: cannot become uid %u: %s\n", (unsigned)uid, strerror(errno));
			_exit(2);
		}
		omst_t *h = NULL;
		CHECK_RC(omst_connect(dm.sock, &h), 0);
		if (h == NULL)
			exit(1);
		omst_info_t info;
		char nm[64], p[800];
		snprintf(nm, sizeof nm, "files/other/%d", (int)getpid());
		CHECK_RC(omst_put_file(h, nm, in, &info), 0);
		CHECK_EQ_U(info.size, n);
		CHECK_RC(omst_get_file(h, nm, out, &info), 0);
		CHECK(holds(out, data, n));
		struct stat st;
		CHECK(stat(out, &st) == 0 && st.st_uid == uid);
		/* the daemon's rights are not lent */
		errno = 0;
		CHECK_RC(omst_put_file(h, "files/other/secret", secret, NULL), OMST_EIO);
		CHECK(errno == EACCES);
		CHECK_RC(omst_stat(h, "files/other/secret", &info), OMST_ENOTFOUND);
		snprintf(p, sizeof p, "%s/stolen", rootdir);
		errno = 0;
		CHECK_RC(omst_get_file(h, nm, p, NULL), OMST_EIO);
		CHECK(errno == EACCES);
		CHECK(access(p, F_OK) != 0);
		omst_close(h);
		fflush(NULL);
		exit(t_failures() ? 1 : 0);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		t_fail(__FILE__, __LINE__, "the client of uid %u failed (status 0x%x)", (unsigned)uid, st);
	chmod(t_tmp, 0700);
	CHECK(holds(secret, "root only", 9));
	CHECK_EQ_U(temps_in(rootdir), 0);
	unlink(secret);
	unlink(in);
	unlink(out);
	rmdir(ud);
	t_daemon_stop(&dm);
	free(data);
}
