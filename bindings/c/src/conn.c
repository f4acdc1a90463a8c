/*
 * conn.c: one unix stream connection to the daemon: connect and HELLO,
 * framed reads through a buffer, writes with sendmsg(MSG_NOSIGNAL).
 *
 * Every read is a recvmsg with room for descriptors (docs section 6.9):
 * descriptors that arrive with the bytes go into a FIFO that GET_FD takes
 * them from; anywhere else they are a protocol error. Waits use poll with
 * the connection's timeout (reset whenever bytes move, or while the file
 * the daemon is reading or writing for the request shows progress: see
 * conn_watch); EINTR is retried. A request frame may carry one of the
 * caller's descriptors (PUT_FD, GET_TO_FD: conn_send_fd). Any IO failure
 * marks the connection broken: the caller closes it.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int conn_break(struct omst_conn *c, int code)
{
	c->broken = 1;
	return code;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The watched file's state: its offset, size and modification time. */
static void watch_mark(int fd, int64_t mark[4])
{
	struct stat st;
	memset(mark, 0, 4 * sizeof *mark);
	mark[0] = (int64_t)lseek(fd, 0, SEEK_CUR);
	if (fstat(fd, &st) == 0) {
		mark[1] = (int64_t)st.st_size;
		mark[2] = (int64_t)st.st_mtim.tv_sec;
		mark[3] = (int64_t)st.st_mtim.tv_nsec;
	}
}

void conn_watch(struct omst_conn *c, int fd)
{
	c->watch = 0;
	if (fd < 0)
		return;
	struct stat st;
	c->watch = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? 1 : 2;
	c->watch_fd = fd;
	if (c->watch == 1)
		watch_mark(fd, c->watch_last);
}

/* 1 if the daemon's work on the watched file counts as progress since the
 * last check (see conn_watch). */
static int watch_progress(struct omst_conn *c)
{
	if (c->watch == 2)
		return 1;
	int64_t m[4];
	watch_mark(c->watch_fd, m);
	if (memcmp(m, c->watch_last, sizeof m) == 0)
		return 0;
	memcpy(c->watch_last, m, sizeof m);
	return 1;
}

/* Waits until fd is ready for events, at most c->timeout_ms (longer while
 * a watched file shows progress). */
static int wait_fd(struct omst_conn *c, short events)
{
	int64_t deadline = now_ms() + c->timeout_ms;
	for (;;) {
		struct pollfd p = {c->fd, events, 0};
		int64_t left = deadline - now_ms();
		if (left < 0)
			left = 0;
		int r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0; /* ready, or an error/hangup the next call reports */
		if (r == 0 && c->watch && (events & POLLIN) && watch_progress(c)) {
			deadline = now_ms() + c->timeout_ms;
			continue;
		}
		if (r == 0)
			return conn_break(c, omst_fail(OMST_ETIMEDOUT, "no progress from the daemon in %d ms",
			                               c->timeout_ms));
		if (errno != EINTR)
			return conn_break(c, omst_fail(OMST_ESYS, "poll: %s", strerror(errno)));
	}
}

/* ---- descriptor FIFO -------------------------------------------------- */

static void fdq_push(struct omst_conn *c, int fd)
{
	if (c->fdq_n == CONN_FDQ) {
		/* Far more than a valid stream can have pending. */
		close(fd);
		c->ctrunc = 1;
		return;
	}
	c->fdq[(c->fdq_head + c->fdq_n) % CONN_FDQ] = fd;
	c->fdq_n++;
}

int conn_take_fds(struct omst_conn *c, int *fds, unsigned n)
{
	if (c->ctrunc) {
		conn_drop_fds(c);
		return conn_break(c, omst_fail(OMST_EMFILE, "descriptors from the daemon were lost "
		                                            "(MSG_CTRUNC: descriptor table full?)"));
	}
	if (c->fdq_n < n) {
		conn_drop_fds(c);
		return conn_break(c, omst_fail(OMST_EPROTO, "FDS frame with %u extents but %u descriptors",
		                               n, c->fdq_n));
	}
	for (unsigned i = 0; i < n; i++) {
		fds[i] = c->fdq[c->fdq_head];
		c->fdq_head = (c->fdq_head + 1) % CONN_FDQ;
		c->fdq_n--;
	}
	return 0;
}

unsigned conn_drop_fds(struct omst_conn *c)
{
	unsigned n = c->fdq_n;
	while (c->fdq_n > 0) {
		close(c->fdq[c->fdq_head]);
		c->fdq_head = (c->fdq_head + 1) % CONN_FDQ;
		c->fdq_n--;
	}
	return n;
}

/* Queues the descriptors of every SCM_RIGHTS message in msg. */
static void collect_fds(struct omst_conn *c, struct msghdr *msg)
{
	if (msg->msg_flags & MSG_CTRUNC)
		c->ctrunc = 1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *data = CMSG_DATA(cm);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, data + i * sizeof(int), sizeof fd);
			fdq_push(c, fd);
		}
	}
}

/* ---- reading ---------------------------------------------------------- */

/* One recvmsg into dst (at most n bytes); returns the count (> 0) or an
 * error code. EOF is OMST_ECONN. */
static ssize_t recv_some(struct omst_conn *c, void *dst, size_t n)
{
	union {
		char buf[CMSG_SPACE(W_MAX_EXTENTS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	for (;;) {
		struct iovec iov = {dst, n};
		struct msghdr msg;
		memset(&msg, 0, sizeof msg);
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof ctl.buf;
		ssize_t r = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (r > 0 || (r == 0 && msg.msg_controllen > 0))
			collect_fds(c, &msg);
		if (r > 0)
			return r;
		if (r == 0)
			return conn_break(c, omst_fail(OMST_ECONN, "connection closed by the daemon"));
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int e = wait_fd(c, POLLIN);
			if (e)
				return e;
			continue;
		}
		return conn_break(c, omst_fail(OMST_ECONN, "connection to the daemon lost: %s", strerror(errno)));
	}
}

/* Makes at least want bytes available in the read buffer. */
static int fill(struct omst_conn *c, size_t want)
{
	if (c->broken)
		return omst_fail(OMST_ECONN, "connection unusable after an earlier error");
	if (c->rend - c->rpos >= want)
		return 0;
	if (c->rpos > 0) {
		memmove(c->rb, c->rb + c->rpos, c->rend - c->rpos);
		c->rend -= c->rpos;
		c->rpos = 0;
	}
	while (c->rend < want) {
		ssize_t r = recv_some(c, c->rb + c->rend, CONN_RBUF - c->rend);
		if (r < 0)
			return (int)r;
		c->rend += (size_t)r;
	}
	return 0;
}

int conn_read_header(struct omst_conn *c, uint32_t *len, uint8_t *type)
{
	int e = fill(c, W_HEADER);
	if (e)
		return e;
	e = w_parse_header(c->rb + c->rpos, len, type);
	if (e)
		return conn_break(c, omst_fail(OMST_EPROTO, "bad frame header from the daemon"));
	c->rpos += W_HEADER;
	return 0;
}

int conn_read(struct omst_conn *c, void *dst, size_t n)
{
	if (c->broken)
		return omst_fail(OMST_ECONN, "connection unusable after an earlier error");
	uint8_t *d = dst;
	size_t have = c->rend - c->rpos;
	if (have > n)
		have = n;
	if (have) {
		memcpy(d, c->rb + c->rpos, have);
		c->rpos += have;
		d += have;
		n -= have;
	}
	/* The buffer is empty now if n > 0. Big reads go straight to dst;
	 * small ones through the buffer (fewer syscalls for what follows). */
	while (n >= CONN_RBUF / 2) {
		ssize_t r = recv_some(c, d, n);
		if (r < 0)
			return (int)r;
		d += r;
		n -= (size_t)r;
	}
	if (n) {
		int e = fill(c, n);
		if (e)
			return e;
		memcpy(d, c->rb + c->rpos, n);
		c->rpos += n;
	}
	return 0;
}

int conn_read_body(struct omst_conn *c, size_t n, const uint8_t **body)
{
	if (n <= CONN_RBUF) {
		int e = fill(c, n);
		if (e)
			return e;
		*body = c->rb + c->rpos;
		c->rpos += n;
		return 0;
	}
	if (c->bodycap < n) {
		uint8_t *p = realloc(c->body, n);
		if (p == NULL)
			return conn_break(c, omst_fail(OMST_ENOMEM, "out of memory for a %zu byte frame", n));
		c->body = p;
		c->bodycap = n;
	}
	int e = conn_read(c, c->body, n);
	if (e)
		return e;
	*body = c->body;
	return 0;
}

int conn_skip(struct omst_conn *c, size_t n)
{
	while (n > 0) {
		size_t k = n < CONN_RBUF ? n : CONN_RBUF;
		int e = fill(c, k);
		if (e)
			return e;
		c->rpos += k;
		n -= k;
	}
	return 0;
}

/* ---- writing ---------------------------------------------------------- */

int conn_sendv(struct omst_conn *c, struct iovec *iov, int n)
{
	if (c->broken)
		return omst_fail(OMST_ECONN, "connection unusable after an earlier error");
	while (n > 0) {
		struct msghdr msg;
		memset(&msg, 0, sizeof msg);
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)n;
		ssize_t r = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				int e = wait_fd(c, POLLOUT);
				if (e)
					return e;
				continue;
			}
			return conn_break(c, omst_fail(OMST_ECONN, "connection to the daemon lost: %s",
			                               strerror(errno)));
		}
		c->nsent += (uint64_t)r;
		size_t done = (size_t)r;
		while (n > 0 && done >= iov->iov_len) {
			done -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + done;
			iov->iov_len -= done;
		}
	}
	return 0;
}

int conn_send(struct omst_conn *c, const void *p, size_t n)
{
	struct iovec iov = {(void *)p, n};
	return conn_sendv(c, &iov, 1);
}

int conn_send_fd(struct omst_conn *c, const void *p, size_t n, int fd)
{
	if (c->broken)
		return omst_fail(OMST_ECONN, "connection unusable after an earlier error");
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	for (;;) {
		struct iovec iov = {(void *)p, n};
		struct msghdr msg;
		memset(&msg, 0, sizeof msg);
		memset(&ctl, 0, sizeof ctl);
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof fd);
		ssize_t r = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				int e = wait_fd(c, POLLOUT);
				if (e)
					return e;
				continue;
			}
			if (errno == EBADF) /* the descriptor to pass; nothing was sent */
				return omst_fail(OMST_EINVAL, "descriptor %d cannot be passed: %s", fd, strerror(errno));
			return conn_break(c, omst_fail(OMST_ECONN, "connection to the daemon lost: %s",
			                               strerror(errno)));
		}
		c->nsent += (uint64_t)r;
		/* The descriptor went with the first byte; the rest is plain. */
		return (size_t)r < n ? conn_send(c, (const uint8_t *)p + r, n - (size_t)r) : 0;
	}
}

int conn_idle_ok(struct omst_conn *c)
{
	if (c->broken || c->rend != c->rpos || c->fdq_n != 0)
		return 0;
	struct pollfd p = {c->fd, POLLIN, 0};
	int r;
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	/* Readable between requests means EOF (the daemon closed the idle
	 * connection) or bytes out of step: either way, do not use it. */
	return r == 0;
}

/* ---- connect ---------------------------------------------------------- */

static int handshake(struct omst_conn *c, uint32_t version, const char *path)
{
	uint8_t f[W_HEADER + 8];
	size_t n = w_enc_hello(f, sizeof f, version);
	int e = conn_send(c, f, n);
	if (e)
		return e;
	uint32_t len;
	uint8_t type;
	const uint8_t *body;
	e = conn_read_header(c, &len, &type);
	if (e)
		return e;
	if (type != FT_HELLO && type != FT_ERROR)
		return conn_break(c, omst_fail(OMST_EPROTO, "daemon at %s answered HELLO with frame type 0x%02x",
		                               path, type));
	if (len > 4096 + 64)
		return conn_break(c, omst_fail(OMST_EPROTO, "daemon at %s: oversized HELLO reply", path));
	e = conn_read_body(c, len, &body);
	if (e)
		return e;
	if (type == FT_ERROR) {
		uint32_t code;
		struct w_str msg;
		if (w_dec_error(body, len, &code, &msg))
			return conn_break(c, omst_fail(OMST_EPROTO, "daemon at %s: malformed ERROR", path));
		omst_fail_msg(0, (const char *)msg.p, msg.n);
		return conn_break(c, omst_code_from_wire(code));
	}
	uint8_t magic[4];
	uint32_t v;
	if (w_dec_hello(body, len, magic, &v))
		return conn_break(c, omst_fail(OMST_EPROTO, "daemon at %s: malformed HELLO", path));
	if (v < 1 || v > version)
		return conn_break(c, omst_fail(OMST_EVERSION, "daemon at %s answered protocol version %u, want 1 to %u",
		                               path, (unsigned)v, (unsigned)version));
	c->version = v;
	return 0;
}

int conn_open(const char *path, int timeout_ms, uint32_t version, struct omst_conn **out)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	size_t pl = strlen(path);
	if (pl == 0 || pl >= sizeof sa.sun_path)
		return omst_fail(OMST_EINVAL, "socket path \"%s\" is empty or longer than %zu bytes", path,
		                 sizeof sa.sun_path - 1);
	memcpy(sa.sun_path, path, pl + 1);

	struct omst_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return omst_fail(OMST_ENOMEM, "out of memory");
	c->timeout_ms = timeout_ms;
	c->rb = malloc(CONN_RBUF);
	if (c->rb == NULL) {
		free(c);
		return omst_fail(OMST_ENOMEM, "out of memory");
	}
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		int e = omst_fail(errno == EMFILE || errno == ENFILE ? OMST_EMFILE : OMST_ESYS, "socket: %s",
		                  strerror(errno));
		free(c->rb);
		free(c);
		return e;
	}
	/* Bounds a connect to a daemon whose accept backlog is full. */
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	int r = connect(c->fd, (struct sockaddr *)&sa, sizeof sa);
	if (r < 0 && (errno == EINTR || errno == EINPROGRESS || errno == EALREADY)) {
		/* The connect goes on in the background: wait for its end. */
		int err = 0;
		socklen_t el = sizeof err;
		r = wait_fd(c, POLLOUT);
		if (r == 0 && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err != 0) {
			errno = err;
			r = -1;
		} else if (r != 0) {
			conn_close(c);
			return r;
		}
	}
	if (r < 0) {
		int err = errno, e;
		if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR)
			/* Printed after omst_strerror's "no omst daemon answers at the
			 * socket" (as the README does): the socket and why, not that
			 * again. */
			e = omst_fail(OMST_ENODAEMON, "%s: %s (start one with omst daemon, or set OMST_SOCKET or OMST_HOME)", path,
			              strerror(err));
		else if (err == EAGAIN || err == ETIMEDOUT)
			e = omst_fail(OMST_ETIMEDOUT, "connect to the omst daemon at %s: timed out", path);
		else
			e = omst_fail(OMST_ESYS, "connect to the omst daemon at %s: %s", path, strerror(err));
		conn_close(c);
		return e;
	}
	int e = handshake(c, version, path);
	if (e) {
		conn_close(c);
		return e;
	}
	*out = c;
	return 0;
}

void conn_close(struct omst_conn *c)
{
	if (c == NULL)
		return;
	conn_drop_fds(c);
	if (c->fd >= 0)
		close(c->fd);
	free(c->rb);
	free(c->body);
	free(c);
}
