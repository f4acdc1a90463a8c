/*
 * api.c: handles and the public calls.
 *
 * A handle is a small pool of connections to one daemon: a call takes an
 * idle connection (or opens one), runs its request without holding the
 * handle's lock, and gives the connection back (or closes it if it is
 * broken). Threads on one handle thus proceed in parallel, each on its
 * own connection; at most POOL_IDLE idle connections are kept.
 *
 * Fork: a handle remembers the pid that owns its connections. The first
 * call in a child (getpid() differs) closes the child's copies of every
 * inherited connection, without any IO on them (the parent's streams are
 * untouched), re-initialises the handle's lock and opens fresh connections.
 * The process-wide lock g_mu serialises that repair and the creation of
 * the default handle; pthread_atfork keeps g_mu consistent across fork.
 *
 * Versions: connections ask for version 8 (OMST_PROTOCOL_VERSION); if the
 * daemon answers UNSUPPORTED_VERSION the handle retries with version 1
 * (and keeps asking for 1 from then on). A daemon answers the smaller of
 * its version and ours: GET_FD needs 2, PUT_FD and GET_TO_FD 5 (below 5 the
 * library streams the caller's file itself, through PUT and GET), the job
 * namespaces' REMOVE_PREFIX, SET_TTL and DU 6 (below 6: OMST_EVERSION),
 * GET_MANY and PUT_MANY 7 (below: one GET or PUT each), the PROGRESS frames
 * of a get into a file 8 (below: the progress callback once, at the end).
 *
 * Files: put_file and get_file open the caller's file here, with the
 * caller's rights (localfile.c), and pass the descriptor (PUT_FD,
 * GET_TO_FD); the library never asks the daemon to open a path (PUT_FILE,
 * GET_FILE: the daemon would use its own rights, and serves them only to
 * its own user).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_IDLE 8
#define DEFAULT_TIMEOUT_MS (2 * 60 * 1000)

struct omst {
	char *path;
	int timeout_ms;
	pid_t pid;             /* process whose connections these are */
	pthread_mutex_t mu;    /* guards everything below */
	uint32_t want_version; /* version to ask for: 8, or 1 after a refusal */
	struct omst_conn *all; /* every open connection (idle or in use) */
	struct omst_conn *idle;
	unsigned nidle;
};

/* The library's global state: the default handle and the lock that guards
 * it and the post-fork repair of handles. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static omst_t *g_default;

static void atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void atfork_child(void) { pthread_mutex_unlock(&g_mu); }
static void init_once(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static int env_timeout_ms(void)
{
	const char *s = getenv("OMST_TIMEOUT_MS");
	if (s && *s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (*end == '\0' && v > 0 && v <= 24L * 3600 * 1000)
			return (int)v;
	}
	return DEFAULT_TIMEOUT_MS;
}

/* The default socket path, malloc'd: $OMST_SOCKET, else $OMST_HOME/omst.sock,
 * else this node's daemon of this Slurm job (slurm.c), else
 * ~/.omst/omst.sock. */
static int default_socket(char **out)
{
	const char *s = getenv("OMST_SOCKET");
	const char *home = getenv("OMST_HOME"), *suffix = "/omst.sock";
	if (s == NULL || *s == '\0') {
		if ((home == NULL || *home == '\0') && omst_slurm_socket(out))
			return 0; /* this node's daemon of this Slurm job (slurm.c) */
		if (home == NULL || *home == '\0') {
			home = getenv("HOME");
			suffix = "/.omst/omst.sock";
			if (home == NULL || *home == '\0')
				home = ".";
		}
	} else {
		home = s;
		suffix = "";
	}
	size_t a = strlen(home), b = strlen(suffix);
	char *p = malloc(a + b + 1);
	if (p == NULL)
		return omst_fail(OMST_ENOMEM, "out of memory");
	memcpy(p, home, a);
	memcpy(p + a, suffix, b + 1);
	*out = p;
	return 0;
}

/* ---- pool ------------------------------------------------------------- */

static void list_add(omst_t *h, struct omst_conn *c)
{
	c->prev = NULL;
	c->next = h->all;
	if (h->all)
		h->all->prev = c;
	h->all = c;
}

static void list_del(omst_t *h, struct omst_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		h->all = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

/* In a child after fork: forget the parent's connections (closing only
 * this process's descriptors) and take the handle over. */
static void after_fork(omst_t *h)
{
	pthread_mutex_lock(&g_mu);
	if (h->pid != getpid()) {
		/* Threads that held h->mu in the parent do not exist here. */
		pthread_mutex_init(&h->mu, NULL);
		struct omst_conn *c = h->all;
		while (c) {
			struct omst_conn *next = c->next;
			conn_close(c);
			c = next;
		}
		h->all = h->idle = NULL;
		h->nidle = 0;
		h->pid = getpid();
	}
	pthread_mutex_unlock(&g_mu);
}

static int open_conn(omst_t *h, struct omst_conn **out)
{
	pthread_mutex_lock(&h->mu);
	uint32_t v = h->want_version;
	pthread_mutex_unlock(&h->mu);
	int e = conn_open(h->path, h->timeout_ms, v, out);
	if (e == OMST_EVERSION && v > 1) {
		e = conn_open(h->path, h->timeout_ms, 1, out);
		if (e == 0) {
			pthread_mutex_lock(&h->mu);
			h->want_version = 1;
			pthread_mutex_unlock(&h->mu);
		}
	}
	if (e)
		return e;
	pthread_mutex_lock(&h->mu);
	list_add(h, *out);
	pthread_mutex_unlock(&h->mu);
	return 0;
}

int handle_acquire(omst_t *h, struct omst_conn **out)
{
	if (h->pid != getpid())
		after_fork(h);
	for (;;) {
		pthread_mutex_lock(&h->mu);
		struct omst_conn *c = h->idle;
		if (c) {
			h->idle = c->inext;
			h->nidle--;
		}
		pthread_mutex_unlock(&h->mu);
		if (c == NULL)
			return open_conn(h, out);
		if (conn_idle_ok(c)) {
			c->rpos = c->rend = 0; /* rend counts this request's reply bytes */
			*out = c;
			return 0;
		}
		/* Closed by the daemon while idle (idle timeout, restart). */
		pthread_mutex_lock(&h->mu);
		list_del(h, c);
		pthread_mutex_unlock(&h->mu);
		conn_close(c);
	}
}

void handle_release(omst_t *h, struct omst_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	int keep = !c->broken && h->nidle < POOL_IDLE && h->pid == getpid();
	if (keep) {
		c->inext = h->idle;
		h->idle = c;
		h->nidle++;
	} else {
		list_del(h, c);
	}
	pthread_mutex_unlock(&h->mu);
	if (!keep)
		conn_close(c);
}

/* Runs one request. A request that fails on a reused connection before
 * the daemon answered anything (ECONN: the daemon closed it meanwhile) is
 * retried once on a new connection. */
#define WITH_CONN(h, call)                                                       \
	do {                                                                     \
		for (int attempt_ = 0;; attempt_++) {                            \
			struct omst_conn *c;                                     \
			int e_ = handle_acquire((h), &c);                        \
			if (e_)                                                  \
				return attempt_ ? OMST_ECONN : e_;               \
			int reused_ = c->used;                                   \
			e_ = (call);                                             \
			int retry_ = e_ == OMST_ECONN && reused_ && attempt_ == 0 && \
			             c->rpos == 0 && c->rend == 0;               \
			handle_release((h), c);                                  \
			if (!retry_)                                             \
				return e_;                                       \
		}                                                                \
	} while (0)

/* Runs one request that passes the caller's file to the daemon or reads or
 * writes it here. It is retried on a new connection only if none of the
 * request was sent (the connection was found closed when writing to it):
 * once the daemon may have read from or written to the file, the file is
 * not where it was (a stream's bytes are gone), and a retry would be
 * wrong. */
#define WITH_CONN_FD(h, call)                                                    \
	do {                                                                     \
		for (int attempt_ = 0;; attempt_++) {                            \
			struct omst_conn *c;                                     \
			int e_ = handle_acquire((h), &c);                        \
			if (e_)                                                  \
				return attempt_ ? OMST_ECONN : e_;               \
			int reused_ = c->used;                                   \
			uint64_t sent_ = c->nsent;                               \
			e_ = (call);                                             \
			int retry_ = e_ == OMST_ECONN && reused_ && attempt_ == 0 && \
			             c->nsent == sent_;                          \
			handle_release((h), c);                                  \
			if (!retry_)                                             \
				return e_;                                       \
		}                                                                \
	} while (0)

/* ---- handles ---------------------------------------------------------- */

OMST_EXPORT int omst_connect(const char *socket_path, omst_t **out)
{
	pthread_once(&g_once, init_once);
	if (out == NULL)
		return omst_fail(OMST_EINVAL, "omst_connect: out is NULL");
	*out = NULL;
	omst_t *h = calloc(1, sizeof *h);
	if (h == NULL)
		return omst_fail(OMST_ENOMEM, "out of memory");
	int e;
	if (socket_path) {
		h->path = strdup(socket_path);
		e = h->path ? 0 : omst_fail(OMST_ENOMEM, "out of memory");
	} else {
		e = default_socket(&h->path);
	}
	if (e) {
		free(h);
		return e;
	}
	h->timeout_ms = env_timeout_ms();
	h->pid = getpid();
	h->want_version = OMST_PROTOCOL_VERSION;
	pthread_mutex_init(&h->mu, NULL);
	/* Connect now so that a missing daemon is reported at once. */
	struct omst_conn *c;
	if ((e = open_conn(h, &c)) != 0) {
		pthread_mutex_destroy(&h->mu);
		free(h->path);
		free(h);
		return e;
	}
	handle_release(h, c);
	*out = h;
	return 0;
}

OMST_EXPORT void omst_close(omst_t *h)
{
	if (h == NULL)
		return;
	/* In a child after fork the connections are the parent's: closing
	 * this process's descriptors only is all after_fork does too. */
	struct omst_conn *c = h->all;
	while (c) {
		struct omst_conn *next = c->next;
		conn_close(c);
		c = next;
	}
	pthread_mutex_destroy(&h->mu);
	free(h->path);
	free(h);
}

/* ---- requests --------------------------------------------------------- */

#define CHECK_HANDLE(h)                                                          \
	do {                                                                     \
		if ((h) == NULL)                                                 \
			return omst_fail(OMST_EINVAL, "%s: handle is NULL", __func__); \
	} while (0)

OMST_EXPORT int omst_put_chunked(omst_t *h, const char *name, const void *data, size_t size, uint32_t chunk_size,
                                 omst_info_t *info)
{
	size_t nlen;
	omst_info_t tmp;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	if (data == NULL && size > 0)
		return omst_fail(OMST_EINVAL, "put: data is NULL");
	if ((e = omst_check_chunk_size(chunk_size)) != 0)
		return e;
	WITH_CONN(h, op_put(c, name, nlen, data, size, chunk_size, info ? info : &tmp));
}

OMST_EXPORT int omst_put(omst_t *h, const char *name, const void *data, size_t size, omst_info_t *info)
{
	return omst_put_chunked(h, name, data, size, 0, info);
}

/* Checks a descriptor the caller passes: open, not O_PATH, not a
 * directory, open for reading (write 0) or writing (write 1). */
static int check_fd(int fd, int write, const char *op)
{
	if (fd < 0)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d", op, fd);
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d: %s", op, fd, strerror(errno));
	struct stat st;
	int acc = fl & O_ACCMODE;
	if ((fl & O_PATH) == O_PATH)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d was opened with O_PATH: it can be neither read nor written",
		                 op, fd);
	if (fstat(fd, &st) != 0)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d: %s", op, fd, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return omst_fail(OMST_EINVAL, "%s: descriptor %d is a directory", op, fd);
	if (write && acc == O_RDONLY)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d is not open for writing", op, fd);
	if (!write && acc == O_WRONLY)
		return omst_fail(OMST_EINVAL, "%s: descriptor %d is not open for reading", op, fd);
	return 0;
}

static int put_fd_conn(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_info_t *info)
{
	if (c->version >= 5)
		return op_put_fd(c, name, nlen, 0, fd, info);
	return op_put_stream(c, name, nlen, 0, fd, info);
}

static int get_to_fd_conn(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_progress_cb cb,
                          void *arg, omst_info_t *info)
{
	if (c->version >= 5)
		return op_get_to_fd(c, name, nlen, fd, cb, arg, info);
	int e = op_get_stream(c, name, nlen, fd, info);
	if (e == 0 && cb)
		e = cb(arg, info->size, info->size);
	return e;
}

static int put_fd_once(omst_t *h, const char *name, size_t nlen, int fd, omst_info_t *info)
{
	WITH_CONN_FD(h, put_fd_conn(c, name, nlen, fd, info));
}

static int get_to_fd_once(omst_t *h, const char *name, size_t nlen, int fd, omst_progress_cb cb, void *arg,
                          omst_info_t *info)
{
	WITH_CONN_FD(h, get_to_fd_conn(c, name, nlen, fd, cb, arg, info));
}

/* Puts path in front of the thread's message (the daemon does not know
 * the path of a file it was passed). errno is kept. */
static int with_path(int e, const char *path)
{
	int err = errno;
	char msg[4608];
	snprintf(msg, sizeof msg, "%s: %s", path, omst_errmsg());
	omst_fail_msg(e, msg, strlen(msg));
	errno = err;
	return e;
}

OMST_EXPORT int omst_put_fd(omst_t *h, const char *name, int fd, omst_info_t *info)
{
	size_t nlen;
	omst_info_t tmp;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e || (e = check_fd(fd, 0, "put_fd")) != 0)
		return e;
	return put_fd_once(h, name, nlen, fd, info ? info : &tmp);
}

OMST_EXPORT int omst_get_to_fd_progress(omst_t *h, const char *name, int fd, omst_progress_cb cb, void *arg,
                                        omst_info_t *info)
{
	size_t nlen;
	omst_info_t tmp;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e || (e = check_fd(fd, 1, "get_to_fd")) != 0)
		return e;
	return get_to_fd_once(h, name, nlen, fd, cb, arg, info ? info : &tmp);
}

OMST_EXPORT int omst_get_to_fd(omst_t *h, const char *name, int fd, omst_info_t *info)
{
	return omst_get_to_fd_progress(h, name, fd, NULL, NULL, info);
}

OMST_EXPORT int omst_put_file(omst_t *h, const char *name, const char *path, omst_info_t *info)
{
	size_t nlen, plen;
	char *abs;
	omst_info_t tmp;
	int fd;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e || (e = omst_abs_path(path, &abs, &plen)) != 0)
		return e;
	if ((e = lf_open_read(abs, h->timeout_ms, &fd)) == 0) {
		if ((e = put_fd_once(h, name, nlen, fd, info ? info : &tmp)) != 0)
			with_path(e, abs);
		int err = errno;
		close(fd);
		errno = err;
	}
	free(abs);
	return e;
}

OMST_EXPORT int omst_get_file_progress(omst_t *h, const char *name, const char *path, omst_progress_cb cb,
                                       void *arg, omst_info_t *info)
{
	size_t nlen, plen;
	char *abs;
	omst_info_t tmp;
	struct lf_dest d;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e || (e = omst_abs_path(path, &abs, &plen)) != 0)
		return e;
	if ((e = lf_create(abs, h->timeout_ms, &d)) == 0) {
		if ((e = get_to_fd_once(h, name, nlen, d.fd, cb, arg, info ? info : &tmp)) != 0) {
			with_path(e, abs);
			lf_abort(&d);
		} else {
			e = lf_commit(&d, abs);
		}
	}
	free(abs);
	return e;
}

OMST_EXPORT int omst_get_file(omst_t *h, const char *name, const char *path, omst_info_t *info)
{
	return omst_get_file_progress(h, name, path, NULL, NULL, info);
}

int handle_get(omst_t *h, const char *name, size_t nlen, void *buf, size_t size, omst_info_t *info)
{
	WITH_CONN(h, op_get(c, name, nlen, buf, size, info));
}

OMST_EXPORT int omst_get(omst_t *h, const char *name, void *buf, size_t size, omst_info_t *info)
{
	size_t nlen;
	omst_info_t tmp;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	if (buf == NULL && size > 0)
		return omst_fail(OMST_EINVAL, "get: buf is NULL");
	return handle_get(h, name, nlen, buf, size, info ? info : &tmp);
}

OMST_EXPORT int omst_stat(omst_t *h, const char *name, omst_info_t *info)
{
	size_t nlen;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	if (info == NULL)
		return omst_fail(OMST_EINVAL, "stat: info is NULL");
	WITH_CONN(h, op_stat(c, name, nlen, info));
}

OMST_EXPORT int omst_remove(omst_t *h, const char *name)
{
	size_t nlen;
	CHECK_HANDLE(h);
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	WITH_CONN(h, op_remove(c, name, nlen));
}

/* ---- job namespaces (version 6) ------------------------------------------- */

/* A prefix or scope as the daemon takes it: UTF-8, at most a name and a
 * '/' long; the daemon checks the rest and names what is wrong. */
static int check_scope(const char *what, const char *s, size_t *len)
{
	if (s == NULL)
		return omst_fail(OMST_EINVAL, "%s is NULL", what);
	size_t n = strnlen(s, OMST_NAME_MAX + 2);
	if (n > OMST_NAME_MAX + 1)
		return omst_fail(OMST_EINVALIDNAME, "invalid %s \"%.64s...\": more than %d bytes", what, s,
		                 OMST_NAME_MAX + 1);
	if (!omst_utf8_valid((const unsigned char *)s, n))
		return omst_fail(OMST_EINVALIDNAME, "invalid %s: not valid UTF-8", what);
	*len = n;
	return 0;
}

static int namespace_conn(struct omst_conn *c, const char *op, const uint8_t *req, size_t n)
{
	if (c->version < 6)
		return omst_fail(OMST_EVERSION, "%s: the daemon speaks protocol version %u, job namespaces need 6", op,
		                 (unsigned)c->version);
	return op_namespace(c, req, n);
}

static int namespace_call(omst_t *h, const char *op, const uint8_t *req, size_t n)
{
	if (n == 0)
		return omst_fail(OMST_EINVAL, "%s: request does not fit in a frame", op);
	WITH_CONN(h, namespace_conn(c, op, req, n));
}

static void rule_result(omst_rule_result_t *res)
{
	if (res == NULL)
		return;
	res->removed = json_u64("removed");
	res->reached = json_u64("reached");
	res->unreached = json_u64("unreached");
	res->ttl_seconds = json_num("ttl_seconds");
	res->seconds = json_num("seconds");
}

OMST_EXPORT int omst_remove_prefix(omst_t *h, const char *prefix, unsigned flags, omst_rule_result_t *res)
{
	size_t plen;
	uint8_t req[W_HEADER + 8 + OMST_NAME_MAX + 1];
	CHECK_HANDLE(h);
	int e = check_scope("prefix", prefix, &plen);
	if (e)
		return e;
	if (flags & ~OMST_EVERYWHERE)
		return omst_fail(OMST_EINVAL, "remove_prefix: unknown flags 0x%x", flags & ~OMST_EVERYWHERE);
	e = namespace_call(h, "remove_prefix", req, w_enc_remove_prefix(req, sizeof req, prefix, plen, flags));
	if (e == 0)
		rule_result(res);
	return e;
}

OMST_EXPORT int omst_set_ttl(omst_t *h, const char *scope, uint64_t ttl_ns, omst_rule_result_t *res)
{
	size_t slen;
	uint8_t req[W_HEADER + 12 + OMST_NAME_MAX + 1];
	CHECK_HANDLE(h);
	int e = check_scope("scope", scope, &slen);
	if (e)
		return e;
	e = namespace_call(h, "set_ttl", req, w_enc_set_ttl(req, sizeof req, scope, slen, ttl_ns));
	if (e == 0)
		rule_result(res);
	return e;
}

OMST_EXPORT int omst_du(omst_t *h, const char *prefix, omst_du_t *du)
{
	size_t plen;
	uint8_t req[W_HEADER + 4 + OMST_NAME_MAX + 1];
	CHECK_HANDLE(h);
	int e = check_scope("prefix", prefix, &plen);
	if (e)
		return e;
	e = namespace_call(h, "du", req, w_enc_name_req(req, sizeof req, FT_DU, prefix, plen));
	if (e == 0 && du != NULL) {
		du->names = json_u64("names");
		du->blobs = json_u64("blobs");
		du->bytes = json_u64("bytes");
		du->held = json_u64("held");
		du->pinned = json_u64("pinned");
		du->unpinned = json_u64("unpinned");
		du->complete = json_u64("complete");
		du->pinned_blobs = json_u64("pinned_blobs");
	}
	return e;
}

static int get_buf(struct omst_conn *c, const char *name, size_t nlen, unsigned flags, omst_buf_t **out)
{
	if (c->version >= 2 && !(flags & OMST_BUF_COPY))
		return op_get_fd(c, name, nlen, flags, out);
	return op_get_anon(c, name, nlen, flags, out);
}

static int get_buf_once(omst_t *h, const char *name, size_t nlen, unsigned flags, omst_buf_t **out)
{
	WITH_CONN(h, get_buf(c, name, nlen, flags, out));
}

OMST_EXPORT int omst_get_buf(omst_t *h, const char *name, unsigned flags, omst_buf_t **out)
{
	size_t nlen;
	CHECK_HANDLE(h);
	if (out == NULL)
		return omst_fail(OMST_EINVAL, "get_buf: out is NULL");
	*out = NULL;
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	if (flags & ~(OMST_BUF_COPY | OMST_BUF_WRITABLE))
		return omst_fail(OMST_EINVAL, "get_buf: unknown flags 0x%x", flags);
	e = get_buf_once(h, name, nlen, flags, out);
	if (e == OMST_EMFILE && !(flags & OMST_BUF_COPY)) {
		/* The descriptors did not fit in the descriptor table: the
		 * bytes themselves still can. */
		e = get_buf_once(h, name, nlen, flags | OMST_BUF_COPY, out);
	}
	return e;
}

/* ---- OmniStorage API: the default handle -------------------------------- */

/* The process's default handle, created at the first call (a failed
 * creation is retried by the next call). g_mu is not held while
 * connecting: a fork in another thread must not wait for a slow daemon. */
static int default_handle(omst_t **out)
{
	pthread_once(&g_once, init_once);
	pthread_mutex_lock(&g_mu);
	omst_t *h = g_default;
	pthread_mutex_unlock(&g_mu);
	if (h == NULL) {
		omst_t *nh;
		int e = omst_connect(NULL, &nh);
		if (e)
			return e;
		pthread_mutex_lock(&g_mu);
		if (g_default == NULL) {
			g_default = nh;
			nh = NULL;
		}
		h = g_default;
		pthread_mutex_unlock(&g_mu);
		omst_close(nh); /* another thread won the race */
	}
	*out = h;
	return 0;
}

OMST_EXPORT int OmstPutData(const char *name, const void *data, size_t size)
{
	omst_t *h;
	int e = default_handle(&h);
	return e ? e : omst_put(h, name, data, size, NULL);
}

OMST_EXPORT int OmstGetData(const char *name, void *data, size_t size)
{
	omst_t *h;
	int e = default_handle(&h);
	return e ? e : omst_get(h, name, data, size, NULL);
}

OMST_EXPORT int OmstPutFile(const char *name, const char *path)
{
	omst_t *h;
	int e = default_handle(&h);
	return e ? e : omst_put_file(h, name, path, NULL);
}

OMST_EXPORT int OmstGetFile(const char *name, const char *path)
{
	omst_t *h;
	int e = default_handle(&h);
	return e ? e : omst_get_file(h, name, path, NULL);
}
