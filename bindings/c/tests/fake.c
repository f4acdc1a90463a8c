/*
 * fake.c: fake daemons speaking (or breaking) the protocol on purpose, for
 * what a real daemon does not do on demand: stall, cut a reply short, send
 * bad frames, refuse version 2, close idle connections, pass odd
 * descriptors. Each connection is served by a thread running a script.
 * A relay in front of the real daemon cuts uploads at a chosen byte.
 */
#include "harness.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

struct fake;
typedef void (*script_fn)(struct fake *f, int fd, int idx);

struct fake {
	char path[256];
	int lfd;
	pthread_t th;
	script_fn fn;
	int nconn;
	uint32_t maxv; /* highest version it speaks */
	int refuse;    /* answer a too-high version with ERROR 9 (like a v1 daemon) */
};

struct cargs {
	struct fake *f;
	int fd, idx;
};

static void *conn_thread(void *arg)
{
	struct cargs *a = arg;
	a->f->fn(a->f, a->fd, a->idx);
	close(a->fd);
	free(a);
	return NULL;
}

static void *accept_thread(void *arg)
{
	struct fake *f = arg;
	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		struct cargs *a = malloc(sizeof *a);
		*a = (struct cargs){f, fd, __atomic_fetch_add(&f->nconn, 1, __ATOMIC_SEQ_CST)};
		pthread_t t;
		pthread_create(&t, NULL, conn_thread, a);
		pthread_detach(t);
	}
}

static int fake_start(struct fake *f, script_fn fn, uint32_t maxv, int refuse)
{
	static int seq;
	memset(f, 0, sizeof *f);
	snprintf(f->path, sizeof f->path, "%s/fake-%d-%d.sock", t_tmp, (int)getpid(), seq++);
	f->fn = fn;
	f->maxv = maxv;
	f->refuse = refuse;
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, f->path);
	unlink(f->path);
	if (bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(f->lfd, 16)) {
		t_fail(__FILE__, __LINE__, "fake daemon: bind/listen %s: %s", f->path, strerror(errno));
		return -1;
	}
	pthread_create(&f->th, NULL, accept_thread, f);
	return 0;
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	close(f->lfd);
	pthread_join(f->th, NULL);
	unlink(f->path);
}

/* ---- script helpers (blocking IO; errors end the script) --------------- */

static int rd(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int wr(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Reads a frame; body (malloc'd) returned in *body. */
static int read_frame(int fd, uint8_t *type, uint8_t **body, uint32_t *len)
{
	uint8_t h[8];
	if (rd(fd, h, 8) || w_parse_header(h, len, type))
		return -1;
	*body = malloc(*len + 1);
	if (rd(fd, *body, *len)) {
		free(*body);
		return -1;
	}
	return 0;
}

static int send_frame(int fd, uint8_t type, const void *body, uint32_t len)
{
	uint8_t h[8];
	w_put_header(h, type, len);
	return wr(fd, h, 8) || wr(fd, body, len);
}

static int send_error(int fd, uint32_t code, const char *msg)
{
	uint8_t b[512];
	uint32_t n = (uint32_t)strlen(msg);
	b[0] = (uint8_t)(code >> 24), b[1] = (uint8_t)(code >> 16), b[2] = (uint8_t)(code >> 8), b[3] = (uint8_t)code;
	b[4] = (uint8_t)(n >> 24), b[5] = (uint8_t)(n >> 16), b[6] = (uint8_t)(n >> 8), b[7] = (uint8_t)n;
	memcpy(b + 8, msg, n);
	return send_frame(fd, FT_ERROR, b, 8 + n);
}

static void be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* An INFO body for name with size bytes; returns its length. */
static uint32_t info_body(uint8_t *b, const uint8_t *name, uint32_t nlen, uint64_t size)
{
	uint32_t o = 0;
	be32(b + o, nlen), o += 4;
	memcpy(b + o, name, nlen), o += nlen;
	be32(b + o, 6), o += 4;
	memcpy(b + o, "bafake", 6), o += 6;
	be64(b + o, size), o += 8;
	be32(b + o, 1u << 20), o += 4;
	be32(b + o, 1), o += 4;
	be64(b + o, 1700000000000000000ull), o += 8;
	be32(b + o, 4), o += 4;
	memcpy(b + o, "peer", 4), o += 4;
	be32(b + o, 1), o += 4;
	return o;
}

static int send_info(int fd, const uint8_t *reqbody, uint64_t size)
{
	uint8_t b[2048];
	uint32_t nlen = (uint32_t)reqbody[0] << 24 | (uint32_t)reqbody[1] << 16 | (uint32_t)reqbody[2] << 8 | reqbody[3];
	if (nlen > 1024)
		nlen = 1024;
	return send_frame(fd, FT_INFO, b, info_body(b, reqbody + 4, nlen, size));
}

/* Answers HELLO; returns the version, or -1 (connection to close). */
static int hello(struct fake *f, int fd)
{
	uint8_t type, *body;
	uint32_t len;
	if (read_frame(fd, &type, &body, &len))
		return -1;
	uint32_t v = (uint32_t)body[4] << 24 | (uint32_t)body[5] << 16 | (uint32_t)body[6] << 8 | body[7];
	free(body);
	if (type != FT_HELLO || len != 8)
		return -1;
	if (v > f->maxv && f->refuse) {
		send_error(fd, 9, "unsupported protocol version");
		return -1;
	}
	if (v > f->maxv)
		v = f->maxv;
	uint8_t out[16];
	w_enc_hello(out, sizeof out, v);
	return wr(fd, out, 16) ? -1 : (int)v;
}

static const uint8_t pattern100[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz!!";

/* ---- timeout ---------------------------------------------------------- */

static void script_stall(struct fake *f, int fd, int idx)
{
	(void)idx;
	if (hello(f, fd) < 0)
		return;
	uint8_t type, *body;
	uint32_t len;
	if (read_frame(fd, &type, &body, &len))
		return;
	free(body);
	/* never answer; wait for the client to go away */
	char c;
	while (read(fd, &c, 1) > 0)
		;
}

/* Reads nothing after HELLO: a PUT fills the socket and stalls. */
static void script_deaf(struct fake *f, int fd, int idx)
{
	(void)idx;
	if (hello(f, fd) < 0)
		return;
	struct pollfd p = {fd, POLLRDHUP, 0};
	poll(&p, 1, 10000); /* until the client hangs up */
}

void test_fake_timeout(void)
{
	struct fake f;
	if (fake_start(&f, script_stall, 2, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "300", 1);
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	omst_info_t info;
	char buf[10];
	double t0 = t_now();
	CHECK_RC(omst_stat(h, "x", &info), OMST_ETIMEDOUT);
	CHECK_RC(omst_get(h, "x", buf, 10, &info), OMST_ETIMEDOUT);
	double el = t_now() - t0;
	CHECK(el > 0.5 && el < 3.0);
	omst_close(h);
	fake_stop(&f);

	/* a PUT to a daemon that does not read */
	if (fake_start(&f, script_deaf, 2, 0))
		return;
	CHECK_RC(omst_connect(f.path, &h), 0);
	size_t n = 16u << 20;
	uint8_t *data = t_pattern(n, 9);
	t0 = t_now();
	CHECK_RC(omst_put(h, "deaf", data, n, NULL), OMST_ETIMEDOUT);
	el = t_now() - t0;
	CHECK(el > 0.25 && el < 3.0);
	free(data);
	omst_close(h);
	fake_stop(&f);
}

/* ---- truncated and overlong GET replies --------------------------------- */

static void script_truncated(struct fake *f, int fd, int idx)
{
	if (hello(f, fd) < 0)
		return;
	uint8_t type, *body;
	uint32_t len;
	if (read_frame(fd, &type, &body, &len))
		return;
	send_info(fd, body, 100);
	free(body);
	switch (idx) {
	case 1: /* half the bytes, then the connection closes */
		send_frame(fd, FT_DATA, pattern100, 50);
		return;
	case 2: /* END after half the bytes */
		send_frame(fd, FT_DATA, pattern100, 50);
		send_frame(fd, FT_END, "", 0);
		break;
	case 3: /* more bytes than INFO said */
		send_frame(fd, FT_DATA, pattern100, 100);
		send_frame(fd, FT_DATA, pattern100, 50);
		send_frame(fd, FT_END, "", 0);
		break;
	case 4: /* ERROR instead of END */
		send_frame(fd, FT_DATA, pattern100, 100);
		send_error(fd, 7, "chunk 0 does not match its hash");
		return; /* close: the client's pooled connection goes stale */
	case 5: /* an empty DATA frame */
		send_frame(fd, FT_DATA, "", 0);
		break;
	default: /* all good */
		send_frame(fd, FT_DATA, pattern100, 60);
		send_frame(fd, FT_DATA, pattern100 + 60, 40);
		send_frame(fd, FT_END, "", 0);
		break;
	}
	char c;
	while (read(fd, &c, 1) > 0)
		;
}

void test_fake_truncated(void)
{
	struct fake f;
	if (fake_start(&f, script_truncated, 2, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "5000", 1);
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0); /* connection 0: idle in the pool */
	/* each call below takes a fresh connection: the failed ones are
	 * closed, so keep the pool empty by holding connection 0 busy */
	struct omst_conn *hold;
	CHECK_RC(handle_acquire(h, &hold), 0);
	uint8_t buf[100];
	int want[] = {0, OMST_ECONN, OMST_EPROTO, OMST_EPROTO, OMST_ECORRUPT, OMST_EPROTO};
	for (int i = 1; i <= 5; i++) {
		memset(buf, 0, sizeof buf);
		int r = omst_get(h, "t", buf, 100, NULL);
		if (r != want[i])
			t_fail(__FILE__, __LINE__, "case %d: %d (%s: %s), want %d", i, r, omst_strerror(r), omst_errmsg(),
			       want[i]);
	}
	CHECK_RC(omst_get(h, "t", buf, 100, NULL), 0);
	CHECK(memcmp(buf, pattern100, 100) == 0);
	handle_release(h, hold);
	omst_close(h);
	fake_stop(&f);
}

/* ---- a version 1 daemon ------------------------------------------------- */

static void script_serve(struct fake *f, int fd, int idx)
{
	(void)idx;
	int v = hello(f, fd);
	if (v < 0)
		return;
	for (;;) {
		uint8_t type, *body;
		uint32_t len;
		if (read_frame(fd, &type, &body, &len))
			return;
		if (type == FT_STAT) {
			send_info(fd, body, 100);
		} else if (type == FT_GET) {
			send_info(fd, body, 100);
			send_frame(fd, FT_DATA, pattern100, 100);
			send_frame(fd, FT_END, "", 0);
		} else {
			send_error(fd, 3, "bad request");
			free(body);
			return;
		}
		free(body);
		if (f->refuse == 2)
			return; /* close after every request (idle close) */
	}
}

void test_fake_version1(void)
{
	struct fake f;
	if (fake_start(&f, script_serve, 1, 1))
		return;
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	omst_buf_t *b = NULL;
	CHECK_RC(omst_get_buf(h, "v1", 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == 0);
		CHECK_EQ_U(omst_buf_size(b), 100);
		CHECK(memcmp(omst_buf_data(b), pattern100, 100) == 0);
		omst_buf_release(b);
	}
	omst_info_t info;
	CHECK_RC(omst_stat(h, "v1", &info), 0);
	CHECK(strcmp(info.name, "v1") == 0);
	CHECK(strcmp(info.id, "bafake") == 0);
	CHECK_EQ_U(info.time_ns, 1700000000000000000ull);
	omst_close(h);
	fake_stop(&f);
}

static int many6_entry(void *arg, const omst_entry_t *e, const void *data, size_t size)
{
	int *ok = arg;
	if (e->status == 0 && size == 100 && memcmp(data, pattern100, 100) == 0 && strcmp(e->name, e->info->name) == 0)
		ok[e->index] = 1;
	return 0;
}

/* A daemon of version 6: omst_get_many and omst_get_many_into send one
 * STAT and GET per name, with the same entries. */
void test_fake_many_version6(void)
{
	struct fake f;
	if (fake_start(&f, script_serve, 6, 0))
		return;
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	const char *names[2] = {"x/1", "x/2"};
	int ok[2] = {0, 0};
	size_t failed = 9;
	CHECK_RC(omst_get_many(h, names, 2, many6_entry, ok, &failed), 0);
	CHECK(ok[0] && ok[1] && failed == 0);
	uint8_t a[100], b[99];
	void *bufs[2] = {a, b};
	size_t sizes[2] = {100, 99};
	int status[2];
	CHECK_RC(omst_get_many_into(h, names, 2, bufs, sizes, status, &failed), 0);
	CHECK_RC(status[0], 0);
	CHECK_RC(status[1], OMST_ESIZE);
	CHECK(failed == 1 && memcmp(a, pattern100, 100) == 0);
	omst_close(h);
	fake_stop(&f);
}

/* A daemon of version 5 has no job namespaces: OMST_EVERSION, nothing
 * sent, and the connection still serves. */
void test_fake_no_namespaces(void)
{
	struct fake f;
	if (fake_start(&f, script_serve, 5, 0))
		return;
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	omst_du_t du;
	CHECK_RC(omst_du(h, "job1", &du), OMST_EVERSION);
	CHECK(strstr(omst_errmsg(), "version 5") != NULL);
	CHECK_RC(omst_remove_prefix(h, "job1", OMST_EVERYWHERE, NULL), OMST_EVERSION);
	CHECK_RC(omst_set_ttl(h, "job1/", 1, NULL), OMST_EVERSION);
	omst_info_t info;
	CHECK_RC(omst_stat(h, "v5", &info), 0);
	omst_close(h);
	fake_stop(&f);
}

void test_fake_idle_close(void)
{
	struct fake f;
	if (fake_start(&f, script_serve, 2, 0))
		return;
	f.refuse = 2;
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	omst_info_t info;
	uint8_t buf[100];
	for (int i = 0; i < 10; i++) {
		CHECK_RC(omst_stat(h, "idle", &info), 0);
		if (i % 2)
			usleep(20000); /* let the close arrive before the next call */
		CHECK_RC(omst_get(h, "idle", buf, 100, NULL), 0);
	}
	omst_close(h);
	fake_stop(&f);
}

/* ---- GET_FD edge cases -------------------------------------------------- */

static int tmpfile_with(const void *prefix, size_t plen, const void *data, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/fdXXXXXX", t_tmp);
	int fd = mkstemp(path);
	unlink(path);
	if (plen && write(fd, prefix, plen) != (ssize_t)plen)
		return -1;
	if (n && write(fd, data, n) != (ssize_t)n)
		return -1;
	return fd;
}

/* Sends an FDS frame with count extents and nfds descriptors. */
static int send_fds(int sock, const struct w_extent *e, uint32_t count, const int *fds, int nfds)
{
	uint8_t buf[8 + 4 + 24 * 64];
	uint32_t len = 4 + 24 * count;
	w_put_header(buf, FT_FDS, len);
	be32(buf + 8, count);
	for (uint32_t i = 0; i < count; i++) {
		be64(buf + 12 + 24 * i, e[i].blob_offset);
		be64(buf + 20 + 24 * i, e[i].length);
		be64(buf + 28 + 24 * i, e[i].file_offset);
	}
	union {
		char b[CMSG_SPACE(64 * sizeof(int))];
		struct cmsghdr a;
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec iov = {buf, 8 + len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
	                   .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)(8 + len) ? 0 : -1;
}

static uint8_t *fd_blob; /* 3 pages + 100 bytes of pattern */
#define FD_BLOB (3 * 4096 + 100)

static void script_fds(struct fake *f, int fd, int idx)
{
	(void)idx;
	if (hello(f, fd) < 0)
		return;
	for (;;) {
		uint8_t type, *body;
		uint32_t len;
		if (read_frame(fd, &type, &body, &len))
			return;
		int mode = body[4] - 'a'; /* names "a".."h" pick the case */
		if (type != FT_GET_FD) {
			free(body);
			return;
		}
		send_info(fd, body, FD_BLOB);
		free(body);
		int f1 = tmpfile_with(NULL, 0, fd_blob, 8192);
		int f2 = tmpfile_with("junk", 4, fd_blob + 8192, FD_BLOB - 8192);
		int f3 = tmpfile_with(NULL, 0, fd_blob + 8192, FD_BLOB - 8192);
		struct w_extent e[2] = {{0, 8192, 0}, {8192, FD_BLOB - 8192, 0}};
		int fds[3] = {f1, f3, f2};
		switch (mode) {
		case 0: /* aligned: both mapped */
			send_fds(fd, e, 2, fds, 2);
			send_frame(fd, FT_END, "", 0);
			break;
		case 1: /* second extent at file offset 4: copied */
			e[1].file_offset = 4;
			fds[1] = f2;
			send_fds(fd, e, 1, fds, 1);
			send_fds(fd, e + 1, 1, fds + 1, 1);
			send_frame(fd, FT_END, "", 0);
			break;
		case 2: /* a descriptor too many */
			send_fds(fd, e, 2, fds, 3);
			send_frame(fd, FT_END, "", 0);
			break;
		case 3: /* a descriptor too few */
			send_fds(fd, e, 2, fds, 1);
			send_frame(fd, FT_END, "", 0);
			break;
		case 4: /* ERROR after the first FDS */
			send_fds(fd, e, 1, fds, 1);
			send_error(fd, 6, "peer unreachable");
			break;
		case 5: /* file shorter than the extent */
			close(f3);
			f3 = tmpfile_with(NULL, 0, fd_blob + 8192, 50);
			fds[1] = f3;
			send_fds(fd, e, 2, fds, 2);
			send_frame(fd, FT_END, "", 0);
			break;
		case 6: /* a gap */
			e[1].blob_offset += 4096;
			send_fds(fd, e, 2, fds, 2);
			send_frame(fd, FT_END, "", 0);
			break;
		case 7: /* END before every byte */
			send_fds(fd, e, 1, fds, 1);
			send_frame(fd, FT_END, "", 0);
			break;
		}
		close(f1);
		close(f2);
		close(f3);
	}
}

void test_fake_fds(void)
{
	struct fake f;
	if (fake_start(&f, script_fds, 2, 0))
		return;
	fd_blob = t_pattern(FD_BLOB, 5);
	setenv("OMST_TIMEOUT_MS", "5000", 1);
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	/* count descriptors with the handle's pool warm */
	omst_buf_t *b = NULL;
	CHECK_RC(omst_get_buf(h, "a", 0, &b), 0);
	omst_buf_release(b);
	int fds0 = t_count_fds();
	const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	int want[] = {0, 0, OMST_EPROTO, OMST_EPROTO, OMST_EUNREACHABLE, OMST_EPROTO, OMST_EPROTO, OMST_EPROTO};
	int zc[] = {1, 0};
	for (int i = 0; i < 8; i++) {
		b = NULL;
		int r = omst_get_buf(h, names[i], 0, &b);
		if (r != want[i])
			t_fail(__FILE__, __LINE__, "case %s: %d (%s: %s), want %d", names[i], r, omst_strerror(r),
			       omst_errmsg(), want[i]);
		if (r == 0 && b) {
			CHECK_EQ_U(omst_buf_size(b), FD_BLOB);
			CHECK(memcmp(omst_buf_data(b), fd_blob, FD_BLOB) == 0);
			if (omst_buf_zero_copy(b) != zc[i])
				t_fail(__FILE__, __LINE__, "case %s: zero_copy %d", names[i], omst_buf_zero_copy(b));
			omst_buf_release(b);
		} else {
			CHECK(b == NULL);
		}
		/* after a failure the pool may have one connection fewer */
		int n = t_count_fds_settled(fds0);
		if (n > fds0)
			t_fail(__FILE__, __LINE__, "case %s: %d descriptors open, %d before", names[i], n, fds0);
	}
	omst_close(h);
	fake_stop(&f);
	free(fd_blob);
}

/* ---- malformed replies -------------------------------------------------- */

static void script_garbage(struct fake *f, int fd, int idx)
{
	if (idx == 1) { /* bad HELLO reply */
		uint8_t type, *body;
		uint32_t len;
		if (read_frame(fd, &type, &body, &len))
			return;
		free(body);
		wr(fd, "\x00\x00\x00\x08\x01\x00\x00\x00XMST\x00\x00\x00\x02", 16);
		return;
	}
	if (hello(f, fd) < 0)
		return;
	uint8_t type, *body;
	uint32_t len;
	if (read_frame(fd, &type, &body, &len))
		return;
	uint8_t ib[2048];
	uint32_t il = info_body(ib, (const uint8_t *)"g", 1, 5);
	switch (idx) {
	case 3: /* flags byte set */
		wr(fd, "\x00\x00\x00\x00\x30\x01\x00\x00", 8);
		break;
	case 4: /* body over 16 MiB */
		wr(fd, "\x01\x00\x00\x01\x31\x00\x00\x00", 8);
		break;
	case 5: /* unknown type */
		wr(fd, "\x00\x00\x00\x00\x77\x00\x00\x00", 8);
		break;
	case 6: /* INFO with a trailing byte */
		ib[il++] = 0;
		send_frame(fd, FT_INFO, ib, il);
		break;
	case 7: /* descriptors with a plain INFO */
	{
		int p = open("/dev/null", O_RDONLY);
		uint8_t fr[2048];
		w_put_header(fr, FT_INFO, il);
		memcpy(fr + 8, ib, il);
		union {
			char b[CMSG_SPACE(sizeof(int))];
			struct cmsghdr a;
		} ctl;
		memset(&ctl, 0, sizeof ctl);
		struct iovec iov = {fr, 8 + il};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
		                   .msg_controllen = sizeof ctl.b};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &p, sizeof p);
		if (sendmsg(fd, &m, MSG_NOSIGNAL) < 0)
			t_log("sendmsg: %s", strerror(errno));
		close(p);
		break;
	}
	case 8: /* ERROR code 0 */
		wr(fd, "\x00\x00\x00\x08\x3f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 16);
		break;
	}
	free(body);
	char c;
	while (read(fd, &c, 1) > 0)
		;
}

void test_fake_garbage(void)
{
	struct fake f;
	if (fake_start(&f, script_garbage, 2, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "5000", 1);
	omst_t *h = NULL;
	f.nconn = 1;
	CHECK_RC(omst_connect(f.path, &h), OMST_EPROTO);
	f.nconn = 2;
	CHECK_RC(omst_connect(f.path, &h), 0);
	if (h == NULL)
		return;
	struct omst_conn *hold;
	CHECK_RC(handle_acquire(h, &hold), 0); /* keep the pool empty */
	omst_info_t info;
	int fds0 = t_count_fds();
	for (int i = 3; i <= 8; i++) {
		int r = omst_stat(h, "g", &info);
		if (r != OMST_EPROTO)
			t_fail(__FILE__, __LINE__, "case %d: %d (%s: %s), want OMST_EPROTO", i, r, omst_strerror(r),
			       omst_errmsg());
	}
	CHECK_EQ_U(t_count_fds_settled(fds0), fds0);
	handle_release(h, hold);
	omst_close(h);
	fake_stop(&f);
}

/* ---- INTERNAL / BAD_REQUEST: the next call reconnects --------------------- */

/* The first connection answers its first request with ERROR f->refuse
 * (10 INTERNAL or 3 BAD_REQUEST) and then only reads: a client that reused
 * it would wait for an answer that never comes. Later connections serve. */
static void script_error_then_serve(struct fake *f, int fd, int idx)
{
	if (idx > 0) {
		script_serve(f, fd, idx);
		return;
	}
	if (hello(f, fd) < 0)
		return;
	uint8_t type, *body;
	uint32_t len;
	if (read_frame(fd, &type, &body, &len))
		return;
	free(body);
	send_error(fd, (uint32_t)f->refuse, "daemon bug");
	/* Read (never answer) until the client closes. */
	while (read_frame(fd, &type, &body, &len) == 0)
		free(body);
}

void test_fake_error_reconnects(void)
{
	const int codes[] = {10, 3};
	const int want[] = {OMST_EINTERNAL, OMST_EBADREQUEST};
	for (int i = 0; i < 2; i++) {
		struct fake f;
		/* It speaks the library's version: refuse carries the error
		 * code here, and hello() would refuse a higher version. */
		if (fake_start(&f, script_error_then_serve, OMST_PROTOCOL_VERSION, 0))
			return;
		f.refuse = codes[i];
		setenv("OMST_TIMEOUT_MS", "1000", 1);
		omst_t *h;
		CHECK_RC(omst_connect(f.path, &h), 0);
		omst_info_t info;
		CHECK_RC(omst_stat(h, "e", &info), want[i]);
		CHECK_RC(omst_stat(h, "e", &info), 0);
		CHECK_EQ_U(f.nconn, 2);
		omst_close(h);
		unsetenv("OMST_TIMEOUT_MS");
		fake_stop(&f);
	}
}

/* ---- cut uploads: a relay in front of the real daemon ------------------ */

/*
 * A relay accepts one connection and passes its bytes to the real daemon
 * (t_sock) and back, but only the first `limit` bytes from the client.
 * There it either cuts both connections (hold 0) or stops reading the
 * client, whose writes then block, until `release` is set (hold 1), and
 * then cuts both. Either way the daemon sees an upload end without its
 * closing empty DATA frame, at a byte chosen by the test.
 */
struct relay {
	char path[256];
	int lfd;
	pthread_t th;
	size_t limit;
	int hold;
	size_t forwarded; /* client bytes passed on (atomic) */
	int at_limit;     /* set once limit is reached (atomic) */
	int release;      /* hold mode: cut now (atomic) */
};

static void *relay_thread(void *arg)
{
	struct relay *r = arg;
	int c = accept(r->lfd, NULL, NULL);
	int d = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", t_sock);
	if (c < 0 || d < 0 || connect(d, (struct sockaddr *)&sa, sizeof sa) != 0)
		goto out;
	static __thread uint8_t buf[64 << 10];
	for (;;) {
		int at = __atomic_load_n(&r->at_limit, __ATOMIC_SEQ_CST);
		if (at && (!r->hold || __atomic_load_n(&r->release, __ATOMIC_SEQ_CST)))
			break;
		struct pollfd p[2] = {{c, at ? 0 : POLLIN, 0}, {d, POLLIN, 0}};
		if (poll(p, 2, 20) < 0 && errno != EINTR)
			break;
		if (!at && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			size_t want = r->limit - r->forwarded;
			ssize_t n = read(c, buf, want < sizeof buf ? want : sizeof buf);
			if (n <= 0 || wr(d, buf, (size_t)n))
				break;
			__atomic_add_fetch(&r->forwarded, (size_t)n, __ATOMIC_SEQ_CST);
			if (r->forwarded == r->limit)
				__atomic_store_n(&r->at_limit, 1, __ATOMIC_SEQ_CST);
		}
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(d, buf, sizeof buf);
			if (n <= 0 || wr(c, buf, (size_t)n))
				break;
		}
	}
out:
	if (c >= 0)
		close(c);
	if (d >= 0)
		close(d);
	return NULL;
}

static int relay_start(struct relay *r, size_t limit, int hold)
{
	static int seq;
	memset(r, 0, sizeof *r);
	snprintf(r->path, sizeof r->path, "%s/relay-%d-%d.sock", t_tmp, (int)getpid(), seq++);
	r->limit = limit;
	r->hold = hold;
	r->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, r->path);
	unlink(r->path);
	if (bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(r->lfd, 4)) {
		t_fail(__FILE__, __LINE__, "relay: bind/listen %s: %s", r->path, strerror(errno));
		return -1;
	}
	pthread_create(&r->th, NULL, relay_thread, r);
	return 0;
}

static void relay_stop(struct relay *r)
{
	__atomic_store_n(&r->release, 1, __ATOMIC_SEQ_CST);
	shutdown(r->lfd, SHUT_RDWR); /* wakes an accept that got nothing */
	pthread_join(r->th, NULL);
	close(r->lfd);
	unlink(r->path);
}

/* 1 if the real daemon's log mentions needle within timeout_ms. */
static int daemon_log_has(const char *needle, int timeout_ms)
{
	char path[320];
	snprintf(path, sizeof path, "%s/daemon.log", t_home);
	double end = t_now() + timeout_ms / 1000.0;
	do {
		FILE *f = fopen(path, "r");
		if (f) {
			char line[4096];
			int found = 0;
			while (!found && fgets(line, sizeof line, f))
				found = strstr(line, needle) != NULL;
			fclose(f);
			if (found)
				return 1;
		}
		usleep(20000);
	} while (t_now() < end);
	return 0;
}

/* After a cut upload of name: the daemon logged it and stores nothing; a
 * complete put of the same name then works and reads back exactly. */
static void check_cut_left_nothing(const char *name, const uint8_t *data, size_t n)
{
	char needle[300];
	snprintf(needle, sizeof needle, "name=%s ", name);
	CHECK(daemon_log_has(needle, 5000));
	omst_t *h = NULL;
	CHECK_RC(omst_connect(t_sock, &h), 0);
	if (h == NULL)
		return;
	omst_info_t info;
	CHECK_RC(omst_stat(h, name, &info), OMST_ENOTFOUND);
	CHECK_RC(omst_put(h, name, data, n, NULL), 0);
	uint8_t *got = malloc(n);
	CHECK_RC(omst_get(h, name, got, n, &info), 0);
	CHECK(memcmp(got, data, n) == 0);
	free(got);
	omst_close(h);
}

/* A put whose connection is cut in the middle of a DATA frame (5 MiB and
 * 100 bytes into the stream) fails with OMST_ECONN, and the daemon stores
 * nothing. */
void test_fake_cut_put(void)
{
	size_t n = 16u << 20;
	uint8_t *data = t_pattern(n, 91);
	char name[256];
	snprintf(name, sizeof name, "%s", t_name("cut/put"));
	struct relay r;
	if (relay_start(&r, (5u << 20) + 100, 0) != 0)
		return;
	omst_t *h = NULL;
	CHECK_RC(omst_connect(r.path, &h), 0);
	if (h) {
		CHECK_RC(omst_put(h, name, data, n, NULL), OMST_ECONN);
		omst_close(h);
	}
	relay_stop(&r);
	check_cut_left_nothing(name, data, n);
	free(data);
}

/* A process killed in the middle of omst_put (SIGKILL while its write is
 * blocked 8 MiB into the upload) leaves no name. */
void test_fake_killed_putter(void)
{
	size_t n = 32u << 20;
	uint8_t *data = t_pattern(n, 92);
	char name[256];
	snprintf(name, sizeof name, "%s", t_name("cut/killed"));
	struct relay r;
	if (relay_start(&r, (8u << 20) + 77, 1) != 0)
		return;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		omst_t *h = NULL;
		if (omst_connect(r.path, &h) != 0)
			_exit(2);
		omst_put(h, name, data, n, NULL);
		_exit(3); /* not reached: the put blocks until the kill */
	}
	double end = t_now() + 30;
	while (!__atomic_load_n(&r.at_limit, __ATOMIC_SEQ_CST) && t_now() < end)
		usleep(1000);
	CHECK(__atomic_load_n(&r.at_limit, __ATOMIC_SEQ_CST));
	usleep(100000); /* the child is blocked writing */
	int st = 0;
	CHECK(waitpid(pid, &st, WNOHANG) == 0);
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	relay_stop(&r);
	check_cut_left_nothing(name, data, n);
	free(data);
}

/* ---- a version 5 daemon: descriptors with PUT_FD and GET_TO_FD ----------- */

/* What the fake received: each request frame's type and how many
 * descriptors came with it. */
static pthread_mutex_t v5_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint8_t type;
	int nfds;
} v5_log[256];
static int v5_n;
static uint8_t *v5_stored; /* the last PUT_FD's bytes */
static size_t v5_stored_n;

/* rd with recvmsg: descriptors that arrive are appended to fds. */
static int rd_fds(int fd, void *p, size_t n, int *fds, int *nfds, int cap)
{
	uint8_t *b = p;
	while (n > 0) {
		union {
			char buf[CMSG_SPACE(8 * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {b, n};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
		                   .msg_controllen = sizeof ctl.buf};
		ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int x;
				memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof x);
				if (*nfds < cap)
					fds[(*nfds)++] = x;
				else
					close(x);
			}
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The request name of a PUT_FD or GET_TO_FD body, NUL-terminated. */
static void req_name(const uint8_t *body, uint32_t len, char *out, size_t cap)
{
	uint32_t n = len >= 4 ? (uint32_t)body[0] << 24 | (uint32_t)body[1] << 16 | (uint32_t)body[2] << 8 | body[3] : 0;
	if (n > len - 4 || n >= cap)
		n = 0;
	memcpy(out, body + 4, n);
	out[n] = '\0';
}

/* A PROGRESS frame of done bytes (version 8). */
static int send_progress(int fd, uint64_t done)
{
	uint8_t b[8];
	be64(b, done);
	return send_frame(fd, FT_PROGRESS, b, 8);
}

/* GET_TO_FD on a connection of version 8, as the daemon answers it: INFO,
 * the stored bytes written in three parts each followed by a PROGRESS,
 * END. Some names break the rules of PROGRESS on purpose: "back" (goes
 * back), "over" (beyond the size), "noend" (END before every byte),
 * "short" (a body of 4 bytes). Returns 0 to go on serving. */
static int serve_get_v8(int fd, const uint8_t *body, const char *name, int out)
{
	uint64_t n = v5_stored_n, third = n / 3;
	send_info(fd, body, n);
	if (strcmp(name, "back") == 0)
		return send_progress(fd, 2 * third) || send_progress(fd, third) ? -1 : 0;
	if (strcmp(name, "over") == 0)
		return send_progress(fd, n + 1) ? -1 : 0;
	if (strcmp(name, "short") == 0) {
		uint8_t b[4] = {0};
		return send_frame(fd, FT_PROGRESS, b, 4) ? -1 : 0;
	}
	if (strcmp(name, "noend") == 0)
		return send_progress(fd, third) || send_frame(fd, FT_END, "", 0) ? -1 : 0;
	uint64_t cuts[3] = {third, 2 * third, n};
	uint64_t at = 0;
	for (int i = 0; i < 3; i++) {
		if (cuts[i] > at && pwrite(out, v5_stored + at, cuts[i] - at, (off_t)at) != (ssize_t)(cuts[i] - at))
			return -1;
		at = cuts[i];
		if (send_progress(fd, at))
			return -1;
	}
	if (ftruncate(out, (off_t)n) != 0)
		return -1;
	return send_frame(fd, FT_END, "", 0) ? -1 : 0;
}

static void script_v5(struct fake *f, int fd, int idx)
{
	(void)idx;
	int version = hello(f, fd);
	if (version < 0)
		return;
	for (;;) {
		uint8_t h[8], type, *body;
		uint32_t len;
		int fds[8], nfds = 0;
		if (rd_fds(fd, h, 8, fds, &nfds, 8) || w_parse_header(h, &len, &type))
			return;
		body = malloc(len + 1);
		if (rd_fds(fd, body, len, fds, &nfds, 8)) {
			free(body);
			return;
		}
		pthread_mutex_lock(&v5_mu);
		if (v5_n < 256)
			v5_log[v5_n].type = type, v5_log[v5_n].nfds = nfds, v5_n++;
		pthread_mutex_unlock(&v5_mu);
		char name[256];
		req_name(body, len, name, sizeof name);
		int ok = 1;
		if ((type == FT_PUT_FD || type == FT_GET_TO_FD) && nfds != 1) {
			send_error(fd, 3, "want exactly one descriptor");
			ok = 0;
		} else if (type == FT_PUT_FD && strcmp(name, "hold") == 0) {
			usleep(1500000); /* neither reads nor answers */
			send_info(fd, body, 0);
		} else if (type == FT_PUT_FD) {
			/* "slow": a byte every 100 ms (the offset moves) */
			int slow = strcmp(name, "slow") == 0;
			uint8_t buf[65536];
			size_t n = 0;
			ssize_t r;
			free(v5_stored);
			v5_stored = NULL;
			while ((r = read(fds[0], buf, slow ? 1 : sizeof buf)) > 0) {
				v5_stored = realloc(v5_stored, n + (size_t)r);
				memcpy(v5_stored + n, buf, (size_t)r);
				n += (size_t)r;
				if (slow)
					usleep(100000);
			}
			v5_stored_n = n;
			send_info(fd, body, n);
		} else if (type == FT_GET_TO_FD && version >= 8) {
			ok = serve_get_v8(fd, body, name, fds[0]) == 0;
		} else if (type == FT_GET_TO_FD && strcmp(name, "progress7") == 0) {
			send_info(fd, body, v5_stored_n);
			send_progress(fd, v5_stored_n);
			ok = 0;
		} else if (type == FT_GET_TO_FD && strcmp(name, "partial") == 0) {
			send_info(fd, body, 100);
			if (write(fds[0], pattern100, 50) != 50)
				ok = 0;
			send_error(fd, 7, "chunk 1 does not match its hash");
		} else if (type == FT_GET_TO_FD) {
			send_info(fd, body, v5_stored_n);
			if (v5_stored_n && write(fds[0], v5_stored, v5_stored_n) != (ssize_t)v5_stored_n)
				ok = 0;
			send_frame(fd, FT_END, "", 0);
		} else if (type == FT_PUT_FILE || type == FT_GET_FILE) {
			send_error(fd, 14, "the daemon opens paths only for its own user");
		} else {
			send_error(fd, 3, "unexpected request");
			ok = 0;
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		free(body);
		if (!ok)
			return;
	}
}

static int temps_in_dir(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q '\\.omst-'", dir);
	return system(cmd) == 0;
}

/* put_file and get_file send PUT_FD and GET_TO_FD, each with exactly one
 * descriptor, and never PUT_FILE or GET_FILE; a get whose daemon fails
 * after writing part of the bytes leaves the destination unchanged and no
 * temporary file. */
void test_fake_fd_frames(void)
{
	struct fake f;
	if (fake_start(&f, script_v5, 5, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "5000", 1);
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	char in[512], out[512];
	snprintf(in, sizeof in, "%s/v5in-%d", t_tmp, (int)getpid());
	snprintf(out, sizeof out, "%s/v5out-%d", t_tmp, (int)getpid());
	FILE *fp = fopen(in, "w");
	fputs("the caller's own file", fp);
	fclose(fp);
	omst_info_t info;
	CHECK_RC(omst_put_file(h, "a", in, &info), 0);
	CHECK_EQ_U(info.size, 21);
	CHECK_RC(omst_get_file(h, "a", out, &info), 0);
	char got[64] = {0};
	fp = fopen(out, "r");
	CHECK(fp && fread(got, 1, sizeof got, fp) == 21 && memcmp(got, "the caller's own file", 21) == 0);
	if (fp)
		fclose(fp);
	setenv("OMST_SOCKET", f.path, 1);
	CHECK_RC(OmstPutFile("b", in), 0);
	CHECK_RC(OmstGetFile("b", out), 0);

	/* A failure after INFO and half the bytes. */
	fp = fopen(out, "w");
	fputs("precious", fp);
	fclose(fp);
	CHECK_RC(omst_get_file(h, "partial", out, &info), OMST_ECORRUPT);
	CHECK(strstr(omst_errmsg(), out) != NULL);
	fp = fopen(out, "r");
	memset(got, 0, sizeof got);
	CHECK(fp && fread(got, 1, sizeof got, fp) == 8 && memcmp(got, "precious", 8) == 0);
	if (fp)
		fclose(fp);
	CHECK(!temps_in_dir(t_tmp));

	pthread_mutex_lock(&v5_mu);
	int puts = 0, gets = 0;
	for (int i = 0; i < v5_n; i++) {
		uint8_t t = v5_log[i].type;
		int want = t == FT_PUT_FD || t == FT_GET_TO_FD ? 1 : 0;
		if (t == FT_PUT_FILE || t == FT_GET_FILE || v5_log[i].nfds != want)
			t_fail(__FILE__, __LINE__, "request %d: type 0x%02x with %d descriptors", i, t, v5_log[i].nfds);
		puts += t == FT_PUT_FD;
		gets += t == FT_GET_TO_FD;
	}
	pthread_mutex_unlock(&v5_mu);
	CHECK_EQ_U(puts, 2);
	CHECK_EQ_U(gets, 3);
	unlink(in);
	unlink(out);
	omst_close(h);
	fake_stop(&f);
}

struct seen_progress {
	int calls;
	uint64_t done[16], size;
	int stop_at; /* return -42 at this call (1-based; 0: never) */
};

static int on_progress(void *arg, uint64_t done, uint64_t size)
{
	struct seen_progress *s = arg;
	if (s->calls < 16)
		s->done[s->calls] = done;
	s->calls++;
	s->size = size;
	return s->calls == s->stop_at ? -42 : 0;
}

static int file_is(const char *path, const char *want)
{
	char got[64] = {0};
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return 0;
	size_t n = fread(got, 1, sizeof got, fp);
	fclose(fp);
	return n == strlen(want) && memcmp(got, want, n) == 0;
}

/* A daemon of version 8 follows a get into a file with PROGRESS frames:
 * the callback sees them in order, the last the size; frames that go back,
 * exceed the size, are not 8 bytes, or an END before the size fail the get
 * with OMST_EPROTO and leave the destination as it was; a callback that
 * returns non-zero stops the get with its value. A daemon of version 7
 * sends none: the callback is called once, with the size, and a PROGRESS
 * on its connection is a protocol error. */
void test_fake_get_progress(void)
{
	struct fake f8, f7;
	if (fake_start(&f8, script_v5, 8, 0) || fake_start(&f7, script_v5, 7, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "5000", 1);
	omst_t *h8, *h7;
	CHECK_RC(omst_connect(f8.path, &h8), 0);
	CHECK_RC(omst_connect(f7.path, &h7), 0);
	char in[512], out[512];
	snprintf(in, sizeof in, "%s/v8in-%d", t_tmp, (int)getpid());
	snprintf(out, sizeof out, "%s/v8out-%d", t_tmp, (int)getpid());
	const char *text = "twenty-one bytes here";
	FILE *fp = fopen(in, "w");
	fputs(text, fp);
	fclose(fp);
	omst_info_t info;
	CHECK_RC(omst_put_file(h8, "a", in, &info), 0);
	CHECK_EQ_U(info.size, 21);

	struct seen_progress s = {0};
	CHECK_RC(omst_get_file_progress(h8, "a", out, on_progress, &s, &info), 0);
	CHECK(file_is(out, text));
	CHECK_EQ_U(s.calls, 3);
	CHECK_EQ_U(s.done[0], 7);
	CHECK_EQ_U(s.done[1], 14);
	CHECK_EQ_U(s.done[2], 21);
	CHECK_EQ_U(s.size, 21);
	/* The plain calls on a connection of version 8. */
	CHECK_RC(omst_get_file(h8, "a", out, &info), 0);
	CHECK(file_is(out, text));
	int fd = open(out, O_WRONLY | O_TRUNC);
	memset(&s, 0, sizeof s);
	CHECK_RC(omst_get_to_fd_progress(h8, "a", fd, on_progress, &s, NULL), 0);
	close(fd);
	CHECK(file_is(out, text) && s.calls == 3 && s.done[2] == 21);

	/* Malformed: the get fails, the destination keeps its bytes. */
	static const char *const bad[] = {"back", "over", "short", "noend"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		fp = fopen(out, "w");
		fputs("precious", fp);
		fclose(fp);
		memset(&s, 0, sizeof s);
		int r = omst_get_file_progress(h8, bad[i], out, on_progress, &s, NULL);
		if (r != OMST_EPROTO)
			t_fail(__FILE__, __LINE__, "%s: %d (%s), want OMST_EPROTO", bad[i], r, omst_errmsg());
		CHECK(strstr(omst_errmsg(), "PROGRESS") != NULL);
		CHECK(file_is(out, "precious"));
		CHECK(!temps_in_dir(t_tmp));
	}
	/* The callback stops the get; the handle works on. */
	memset(&s, 0, sizeof s);
	s.stop_at = 1;
	CHECK_RC(omst_get_file_progress(h8, "a", out, on_progress, &s, NULL), -42);
	CHECK_EQ_U(s.calls, 1);
	CHECK(file_is(out, "precious") && !temps_in_dir(t_tmp));
	memset(&s, 0, sizeof s);
	CHECK_RC(omst_get_file_progress(h8, "a", out, on_progress, &s, NULL), 0);
	CHECK(file_is(out, text) && s.calls == 3);

	/* Version 7: no PROGRESS; the callback once, with the size. */
	memset(&s, 0, sizeof s);
	CHECK_RC(omst_get_file_progress(h7, "a", out, on_progress, &s, &info), 0);
	CHECK(file_is(out, text));
	CHECK_EQ_U(s.calls, 1);
	CHECK_EQ_U(s.done[0], 21);
	CHECK_EQ_U(s.size, 21);
	CHECK_RC(omst_get_file_progress(h7, "progress7", out, on_progress, &s, NULL), OMST_EPROTO);
	CHECK(file_is(out, text) && !temps_in_dir(t_tmp));

	unlink(in);
	unlink(out);
	omst_close(h8);
	omst_close(h7);
	fake_stop(&f8);
	fake_stop(&f7);
}

/* The wait for the reply to PUT_FD goes on past the timeout while a
 * regular file's offset moves; a regular file the daemon does not touch
 * times out; a stream is left to the daemon. */
void test_fake_fd_progress(void)
{
	struct fake f;
	if (fake_start(&f, script_v5, 5, 0))
		return;
	setenv("OMST_TIMEOUT_MS", "400", 1);
	omst_t *h;
	CHECK_RC(omst_connect(f.path, &h), 0);
	char in[512];
	snprintf(in, sizeof in, "%s/v5slow-%d", t_tmp, (int)getpid());
	FILE *fp = fopen(in, "w");
	fputs("fifteen bytes!!", fp);
	fclose(fp);
	int fd = open(in, O_RDONLY);
	omst_info_t info;
	double t0 = t_now();
	CHECK_RC(omst_put_fd(h, "slow", fd, &info), 0);
	CHECK_EQ_U(info.size, 15);
	CHECK(t_now() - t0 > 1.3);
	lseek(fd, 0, SEEK_SET);
	t0 = t_now();
	CHECK_RC(omst_put_fd(h, "hold", fd, &info), OMST_ETIMEDOUT);
	CHECK(t_now() - t0 < 1.3);
	close(fd);
	int p[2];
	CHECK(pipe(p) == 0);
	CHECK(write(p[1], "x", 1) == 1);
	close(p[1]);
	t0 = t_now();
	CHECK_RC(omst_put_fd(h, "hold", p[0], &info), 0);
	CHECK(t_now() - t0 > 1.3);
	close(p[0]);
	unlink(in);
	omst_close(h);
	fake_stop(&f);
}

/* ---- a relay that caps the version the real daemon answers -------------- */

struct vrelay {
	char path[256];
	int lfd;
	pthread_t th;
	uint32_t max;
	size_t hold_after; /* stop reading clients after this many bytes (0: never) */
	int released;
	size_t forwarded; /* client bytes passed on, all connections */
	int version_seen;
	int stop;
	int active; /* connection threads running */
};

struct vconn {
	struct vrelay *r;
	int c;
};

static void *vrelay_conn(void *arg)
{
	struct vconn *vc = arg;
	struct vrelay *r = vc->r;
	int c = vc->c;
	free(vc);
	int d = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", t_sock);
	uint8_t hello[16];
	if (d < 0 || connect(d, (struct sockaddr *)&sa, sizeof sa) != 0 || rd(c, hello, 16) != 0)
		goto out;
	uint32_t v = (uint32_t)hello[12] << 24 | (uint32_t)hello[13] << 16 | (uint32_t)hello[14] << 8 | hello[15];
	__atomic_store_n(&r->version_seen, (int)v, __ATOMIC_SEQ_CST);
	if (v > r->max)
		be32(hello + 12, r->max);
	if (wr(d, hello, 16) != 0)
		goto out;
	__atomic_add_fetch(&r->forwarded, 16, __ATOMIC_SEQ_CST);
	static __thread uint8_t buf[64 << 10];
	while (!__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST)) {
		size_t hold = __atomic_load_n(&r->hold_after, __ATOMIC_SEQ_CST);
		size_t fw = __atomic_load_n(&r->forwarded, __ATOMIC_SEQ_CST);
		int held = hold && !__atomic_load_n(&r->released, __ATOMIC_SEQ_CST);
		size_t room = held ? (fw < hold ? hold - fw : 0) : sizeof buf;
		struct pollfd p[2] = {{c, room ? POLLIN : 0, 0}, {d, POLLIN, 0}};
		if (poll(p, 2, 20) < 0 && errno != EINTR)
			break;
		if (room && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(c, buf, room < sizeof buf ? room : sizeof buf);
			if (n <= 0 || wr(d, buf, (size_t)n))
				break;
			__atomic_add_fetch(&r->forwarded, (size_t)n, __ATOMIC_SEQ_CST);
		}
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(d, buf, sizeof buf);
			if (n <= 0 || wr(c, buf, (size_t)n))
				break;
		}
	}
out:
	close(c);
	if (d >= 0)
		close(d);
	__atomic_sub_fetch(&r->active, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *vrelay_accept(void *arg)
{
	struct vrelay *r = arg;
	for (;;) {
		int c = accept(r->lfd, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		struct vconn *vc = malloc(sizeof *vc);
		*vc = (struct vconn){r, c};
		__atomic_add_fetch(&r->active, 1, __ATOMIC_SEQ_CST);
		pthread_t t;
		pthread_create(&t, NULL, vrelay_conn, vc);
		pthread_detach(t);
	}
}

struct vrelay *vrelay_start(uint32_t max)
{
	static int seq;
	struct vrelay *r = calloc(1, sizeof *r);
	snprintf(r->path, sizeof r->path, "%s/vrelay-%d-%d.sock", t_tmp, (int)getpid(), seq++);
	r->max = max;
	r->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, r->path);
	unlink(r->path);
	if (bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(r->lfd, 16)) {
		t_fail(__FILE__, __LINE__, "relay: bind/listen %s: %s", r->path, strerror(errno));
		close(r->lfd);
		free(r);
		return NULL;
	}
	pthread_create(&r->th, NULL, vrelay_accept, r);
	return r;
}

const char *vrelay_path(struct vrelay *r) { return r->path; }
void vrelay_hold(struct vrelay *r, size_t after) { __atomic_store_n(&r->hold_after, after, __ATOMIC_SEQ_CST); }
void vrelay_release(struct vrelay *r) { __atomic_store_n(&r->released, 1, __ATOMIC_SEQ_CST); }
size_t vrelay_forwarded(struct vrelay *r) { return __atomic_load_n(&r->forwarded, __ATOMIC_SEQ_CST); }
int vrelay_version_seen(struct vrelay *r) { return __atomic_load_n(&r->version_seen, __ATOMIC_SEQ_CST); }

void vrelay_stop(struct vrelay *r)
{
	shutdown(r->lfd, SHUT_RDWR);
	pthread_join(r->th, NULL);
	close(r->lfd);
	__atomic_store_n(&r->stop, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&r->active, __ATOMIC_SEQ_CST) > 0)
		usleep(1000);
	unlink(r->path);
	free(r);
}
