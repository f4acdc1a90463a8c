/*
 * ops.c: one request on one connection (docs section 6). Arguments are
 * already checked by the caller. Contract of every op_*:
 *   - returns 0 only when the reply was complete and valid (for GET: END
 *     after exactly info.size bytes; for GET_FD: END with every extent
 *     placed and no descriptor left over);
 *   - a daemon ERROR is returned as its code with the daemon's message;
 *     the connection stays usable unless the error was BAD_REQUEST (the
 *     daemon closes the connection then);
 *   - anything else (IO error, timeout, protocol violation) marks the
 *     connection broken so that the caller closes it.
 * Descriptors received outside a GET_FD are a protocol error.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Request frames of names and paths fit in this (1024 + 4096 + 20 bytes). */
#define REQ_MAX (W_HEADER + 16 + OMST_NAME_MAX + W_MAX_PATH)
/* Drain at most this much of an unwanted GET reply, else drop the connection. */
#define DRAIN_LIMIT (4u << 20)

static int send_frame(struct omst_conn *c, const uint8_t *f, size_t n)
{
	if (n == 0)
		return omst_fail(OMST_EINVAL, "request does not fit in a frame");
	c->used = 1;
	return conn_send(c, f, n);
}

/* Fails if descriptors arrived where none belong. */
static int no_fds(struct omst_conn *c)
{
	if (c->fdq_n || c->ctrunc) {
		conn_drop_fds(c);
		return conn_break(c, omst_fail(OMST_EPROTO, "daemon sent descriptors outside a GET_FD"));
	}
	return 0;
}

/* Decodes an ERROR body and returns its code (the message becomes the
 * thread's message); a BADREQUEST or INTERNAL marks the connection broken. */
int error_reply(struct omst_conn *c, const uint8_t *body, size_t len)
{
	uint32_t code;
	struct w_str msg;
	if (w_dec_error(body, len, &code, &msg))
		return conn_break(c, omst_fail(OMST_EPROTO, "malformed ERROR frame from the daemon"));
	int e = omst_code_from_wire(code);
	if (e == OMST_EUNKNOWN)
		omst_fail(e, "daemon error code %u: %.*s", (unsigned)code, (int)msg.n, (const char *)msg.p);
	else
		omst_fail_msg(e, (const char *)msg.p, msg.n);
	if (e == OMST_EBADREQUEST || e == OMST_EINTERNAL)
		c->broken = 1; /* the daemon may close the connection: reconnect next time */
	return e;
}

static int unexpected(struct omst_conn *c, uint8_t type, const char *want)
{
	return conn_break(c, omst_fail(OMST_EPROTO, "daemon sent frame type 0x%02x, expected %s", type, want));
}

/* Reads the reply to a request: a frame of type want (named what in the
 * error if another comes), its body in *body and *len, or an ERROR, whose
 * reason is returned as the daemon's. No descriptor may come with it,
 * unless fds_follow (GET_FD: its first FDS frame, and its descriptors, may
 * arrive with the reply). */
static int read_reply(struct omst_conn *c, uint8_t want, const char *what, int fds_follow, uint32_t *len,
                      const uint8_t **body)
{
	uint8_t type;
	int e = conn_read_header(c, len, &type);
	if (e)
		return e;
	if (type != want && type != FT_ERROR)
		return unexpected(c, type, what);
	if ((e = conn_read_body(c, *len, body)) != 0)
		return e;
	if ((!fds_follow || type == FT_ERROR) && (e = no_fds(c)) != 0)
		return e;
	if (type == FT_ERROR)
		return error_reply(c, *body, *len);
	return 0;
}

/* Reads a reply that is INFO or ERROR. fds_follow: the reply to GET_FD,
 * whose first FDS frame (and its descriptors) may arrive with the INFO. */
static int read_info_fds(struct omst_conn *c, omst_info_t *info, int fds_follow)
{
	uint32_t len;
	const uint8_t *body;
	int e = read_reply(c, FT_INFO, "INFO", fds_follow, &len, &body);
	if (e)
		return e;
	struct w_info in;
	if (w_dec_info(body, len, &in) || w_info_export(&in, info))
		return conn_break(c, omst_fail(OMST_EPROTO, "malformed INFO frame from the daemon"));
	return 0;
}

static int read_info(struct omst_conn *c, omst_info_t *info)
{
	return read_info_fds(c, info, 0);
}

/* ---- PUT -------------------------------------------------------------- */

/* An upload whose write failed with e: the daemon may have answered and
 * closed the connection (for example BAD_REQUEST, or the ERROR of a put
 * that failed early): its reply says more than EPIPE. Look for it briefly;
 * the connection is closed afterwards either way. */
static int upload_failed(struct omst_conn *c, int e)
{
	int timeout = c->timeout_ms;
	omst_info_t tmp;
	c->broken = 0;
	c->timeout_ms = 100;
	int r = read_info(c, &tmp);
	c->timeout_ms = timeout;
	c->broken = 1;
	if (r < 0 && r > OMST_EINVAL && r != OMST_ETIMEDOUT)
		return r; /* a daemon error code */
	return omst_fail(e == OMST_ETIMEDOUT ? e : OMST_ECONN, "put: connection to the daemon lost during the upload");
}

int op_put(struct omst_conn *c, const char *name, size_t nlen, const void *data, size_t size,
           uint32_t chunk_size, omst_info_t *info)
{
	uint8_t req[W_HEADER + 8 + OMST_NAME_MAX + W_HEADER];
	size_t n = w_enc_put(req, sizeof req, name, nlen, chunk_size);
	if (n == 0)
		return omst_fail(OMST_EINVAL, "request does not fit in a frame");
	c->used = 1;
	/* PUT, then DATA frames of 1 MiB, each header and payload (and the PUT
	 * with the first) in one sendmsg; then the empty DATA. */
	const uint8_t *p = data;
	size_t left = size;
	int e = 0;
	while (left > 0 && e == 0) {
		size_t k = left < W_DATA_FRAME ? left : W_DATA_FRAME;
		uint8_t *h = req + n;
		w_put_header(h, FT_DATA, (uint32_t)k);
		struct iovec iov[2] = {{req, n + W_HEADER}, {(void *)p, k}};
		e = conn_sendv(c, iov, 2);
		n = 0; /* later frames: only the DATA header, at req[0] */
		p += k;
		left -= k;
	}
	if (e == 0) {
		n += w_enc_empty(req + n, sizeof req - n, FT_DATA);
		e = conn_send(c, req, n);
	}
	if (e)
		return upload_failed(c, e);
	return read_info(c, info);
}

int op_stat(struct omst_conn *c, const char *name, size_t nlen, omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_name_req(req, sizeof req, FT_STAT, name, nlen));
	return e ? e : read_info(c, info);
}

int op_remove(struct omst_conn *c, const char *name, size_t nlen)
{
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_name_req(req, sizeof req, FT_REMOVE, name, nlen));
	if (e)
		return e;
	uint32_t len;
	const uint8_t *body;
	if ((e = read_reply(c, FT_OK, "OK", 0, &len, &body)) != 0)
		return e;
	if (len != 0)
		return conn_break(c, omst_fail(OMST_EPROTO, "OK frame with a body"));
	return 0;
}

/* ---- GET -------------------------------------------------------------- */

/* Reads the DATA frames of a GET after INFO into dst (size bytes, the
 * blob's size) up to END. dst NULL: discard. */
static int get_body(struct omst_conn *c, uint8_t *dst, size_t size)
{
	size_t got = 0;
	for (;;) {
		uint32_t len;
		uint8_t type;
		const uint8_t *body;
		int e = conn_read_header(c, &len, &type);
		if (e)
			return e;
		switch (type) {
		case FT_DATA:
			if (len == 0 || len > size - got)
				return conn_break(c, omst_fail(OMST_EPROTO, "daemon sent more than the blob's %zu bytes",
				                               size));
			e = dst ? conn_read(c, dst + got, len) : conn_skip(c, len);
			if (e)
				return e;
			got += len;
			break;
		case FT_END:
			if ((e = no_fds(c)) != 0)
				return e;
			if (len != 0 || got != size)
				return conn_break(c, omst_fail(OMST_EPROTO, "GET ended after %zu of %zu bytes", got, size));
			return 0;
		case FT_ERROR:
			if ((e = conn_read_body(c, len, &body)) != 0)
				return e;
			if ((e = no_fds(c)) != 0)
				return e;
			return error_reply(c, body, len);
		default:
			return unexpected(c, type, "DATA or END");
		}
	}
}

/* Sends GET and reads INFO. */
static int get_begin(struct omst_conn *c, uint8_t type, const char *name, size_t nlen, omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_name_req(req, sizeof req, type, name, nlen));
	return e ? e : read_info_fds(c, info, type == FT_GET_FD);
}

int op_get(struct omst_conn *c, const char *name, size_t nlen, void *buf, size_t size, omst_info_t *info)
{
	int e = get_begin(c, FT_GET, name, nlen, info);
	if (e)
		return e;
	if (info->size != size) {
		/* Nothing goes into buf: skip the bytes (or drop the connection,
		 * which cancels the request, when there are many). */
		if (info->size <= DRAIN_LIMIT)
			get_body(c, NULL, (size_t)info->size);
		else
			c->broken = 1;
		return omst_fail(OMST_ESIZE, "\"%s\" has %llu bytes, not %zu", info->name,
		                 (unsigned long long)info->size, size);
	}
	return get_body(c, buf, size);
}

int op_get_anon(struct omst_conn *c, const char *name, size_t nlen, unsigned flags, omst_buf_t **out)
{
	omst_info_t info;
	int e = get_begin(c, FT_GET, name, nlen, &info);
	if (e)
		return e;
	omst_buf_t *b;
	if ((e = buf_new_anon(&info, flags, &b)) != 0) {
		c->broken = 1;
		return e;
	}
	if ((e = get_body(c, b->base, b->size)) == 0)
		e = buf_finish(b);
	if (e) {
		omst_buf_release(b);
		return e;
	}
	*out = b;
	return 0;
}

int op_get_fd(struct omst_conn *c, const char *name, size_t nlen, unsigned flags, omst_buf_t **out)
{
	omst_info_t info;
	int e = get_begin(c, FT_GET_FD, name, nlen, &info);
	if (e)
		return e;
	omst_buf_t *b;
	if ((e = buf_new_reserved(&info, flags, &b)) != 0) {
		c->broken = 1;
		return e;
	}
	for (;;) {
		uint32_t len, count;
		uint8_t type;
		const uint8_t *body;
		struct w_extent ext[W_MAX_EXTENTS];
		int fds[W_MAX_EXTENTS];
		if ((e = conn_read_header(c, &len, &type)) != 0)
			break;
		if (type != FT_FDS && type != FT_END && type != FT_ERROR) {
			e = unexpected(c, type, "FDS or END");
			break;
		}
		if ((e = conn_read_body(c, len, &body)) != 0)
			break;
		if (type == FT_ERROR) {
			e = no_fds(c);
			if (e == 0)
				e = error_reply(c, body, len);
			break;
		}
		if (type == FT_END) {
			if ((e = no_fds(c)) == 0 && len != 0)
				e = conn_break(c, omst_fail(OMST_EPROTO, "END frame with a body"));
			if (e == 0)
				e = buf_finish(b);
			if (e)
				c->broken = 1;
			break;
		}
		if (w_dec_fds(body, len, &count, ext)) {
			e = conn_break(c, omst_fail(OMST_EPROTO, "malformed FDS frame from the daemon"));
			break;
		}
		if ((e = conn_take_fds(c, fds, count)) != 0)
			break;
		for (uint32_t i = 0; i < count; i++) {
			if (e == 0)
				e = buf_add_extent(b, &ext[i], fds[i]);
			close(fds[i]);
		}
		if (e) {
			/* The stream is in step but the rest is of no use. */
			c->broken = 1;
			break;
		}
	}
	if (e) {
		conn_drop_fds(c);
		omst_buf_release(b);
		return e;
	}
	*out = b;
	return 0;
}

/* ---- the caller's files: PUT_FD, GET_TO_FD (version 5) ------------------ */

int op_put_fd(struct omst_conn *c, const char *name, size_t nlen, uint32_t chunk_size, int fd, omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	size_t n = w_enc_put_fd(req, sizeof req, name, nlen, chunk_size);
	if (n == 0)
		return omst_fail(OMST_EINVAL, "request does not fit in a frame");
	c->used = 1;
	int e = conn_send_fd(c, req, n, fd);
	if (e)
		return e;
	conn_watch(c, fd);
	e = read_info(c, info);
	conn_watch(c, -1);
	return e;
}

int progress_check(uint64_t done, uint64_t last, uint64_t size)
{
	if (done > size)
		return omst_fail(OMST_EPROTO, "PROGRESS of %llu bytes for a blob of %llu", (unsigned long long)done,
		                 (unsigned long long)size);
	if (done < last)
		return omst_fail(OMST_EPROTO, "PROGRESS went back from %llu to %llu bytes", (unsigned long long)last,
		                 (unsigned long long)done);
	return 0;
}

/* Reads the rest of a GET_TO_FD reply after its INFO: PROGRESS frames
 * (version 8), then END or ERROR (op_get_to_fd). */
static int read_get_to_end(struct omst_conn *c, const omst_info_t *info, omst_progress_cb cb, void *arg)
{
	uint64_t last = 0;
	for (;;) {
		uint32_t len;
		uint8_t type;
		const uint8_t *body;
		int e = conn_read_header(c, &len, &type);
		if (e)
			return e;
		if (type == FT_PROGRESS && c->version < 8)
			return unexpected(c, type, "END");
		if (type != FT_PROGRESS && type != FT_END && type != FT_ERROR)
			return unexpected(c, type, c->version >= 8 ? "PROGRESS or END" : "END");
		if ((e = conn_read_body(c, len, &body)) != 0 || (e = no_fds(c)) != 0)
			return e;
		if (type == FT_ERROR)
			return error_reply(c, body, len);
		if (type == FT_END) {
			if (len != 0)
				return conn_break(c, omst_fail(OMST_EPROTO, "END frame with a body"));
			if (c->version >= 8 && last != info->size)
				return conn_break(c, omst_fail(OMST_EPROTO, "END after PROGRESS of %llu bytes, not the blob's %llu",
				                               (unsigned long long)last, (unsigned long long)info->size));
			if (c->version < 8 && cb && (e = cb(arg, info->size, info->size)) != 0)
				return e; /* the reply is complete: the connection stays in step */
			return 0;
		}
		uint64_t done;
		if (w_dec_progress(body, len, &done))
			return conn_break(c, omst_fail(OMST_EPROTO, "malformed PROGRESS frame from the daemon (%u bytes)",
			                               (unsigned)len));
		if ((e = progress_check(done, last, info->size)) != 0)
			return conn_break(c, e);
		last = done;
		if (cb && (e = cb(arg, done, info->size)) != 0)
			return conn_break(c, omst_fail(e, "get: stopped by the progress callback at %llu of %llu bytes",
			                               (unsigned long long)done, (unsigned long long)info->size));
	}
}

int op_get_to_fd(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_progress_cb cb, void *arg,
                 omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	size_t n = w_enc_name_req(req, sizeof req, FT_GET_TO_FD, name, nlen);
	if (n == 0)
		return omst_fail(OMST_EINVAL, "request does not fit in a frame");
	c->used = 1;
	int e = conn_send_fd(c, req, n, fd);
	if (e)
		return e;
	conn_watch(c, fd);
	/* INFO once the blob is found, then (version 8) PROGRESS frames, then
	 * END when every byte is in the file, or ERROR instead of any. */
	e = read_info(c, info);
	if (e == 0)
		e = read_get_to_end(c, info, cb, arg);
	conn_watch(c, -1);
	return e;
}

/* ---- the same on a daemon older than version 5: streamed here ----------- */

/* Waits until the caller's stream fd has bytes (or its end) to read. If
 * the daemon speaks first, in the middle of the upload (an ERROR of a put
 * that failed early, or its close), that is returned instead: the upload
 * has no reader any more. */
static int wait_input(struct omst_conn *c, int fd)
{
	for (;;) {
		struct pollfd p[2] = {{fd, POLLIN, 0}, {c->fd, POLLIN, 0}};
		int r = poll(p, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return conn_break(c, omst_fail(OMST_ESYS, "poll: %s", strerror(errno)));
		if (p[1].revents)
			return upload_failed(c, OMST_ECONN);
		if (p[0].revents)
			return 0;
	}
}

/* Reads at most n bytes of the caller's file fd into p (one read: a
 * stream's bytes go on as they come), the count in *got (0 at the end of
 * file). Returns 0, 1 for a read error (errno set), or a library code
 * from wait_input. */
static int read_input(struct omst_conn *c, int fd, int stream, void *p, size_t n, ssize_t *got)
{
	for (;;) {
		if (stream) {
			int e = wait_input(c, fd);
			if (e)
				return e;
		}
		ssize_t r = read(fd, p, n);
		if (r >= 0) {
			*got = r;
			return 0;
		}
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			continue; /* a non-blocking stream: wait_input again */
		return 1;
	}
}

/* Cancels an upload (ABORT; the daemon answers ERROR ABORTED and stores
 * nothing), then fails with code and msg. */
static int upload_abort(struct omst_conn *c, int code, const char *msg)
{
	uint8_t f[W_HEADER];
	omst_info_t tmp;
	if (conn_send(c, f, w_enc_empty(f, sizeof f, FT_ABORT)) == 0 && read_info(c, &tmp) != OMST_EABORTED)
		c->broken = 1;
	return omst_fail(code, "%s", msg);
}

int op_put_stream(struct omst_conn *c, const char *name, size_t nlen, uint32_t chunk_size, int fd, omst_info_t *info)
{
	struct stat st0;
	if (fstat(fd, &st0) != 0)
		return omst_fail(OMST_EIO, "put: stat the file: %s", strerror(errno));
	int regular = S_ISREG(st0.st_mode);
	off_t off = 0, size = st0.st_size;
	if (regular && (off = lseek(fd, 0, SEEK_CUR)) < 0)
		return omst_fail(OMST_EIO, "put: offset of the file: %s", strerror(errno));
	/* PUT alone first: if it cannot be sent, nothing was read yet (and the
	 * request may be retried on a new connection). */
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_put(req, sizeof req, name, nlen, chunk_size));
	if (e)
		return e;
	uint8_t *buf = malloc(W_HEADER + W_DATA_FRAME);
	if (buf == NULL) {
		c->broken = 1; /* the upload cannot be ended properly */
		return omst_fail(OMST_ENOMEM, "out of memory");
	}
	char msg[512];
	for (;;) {
		size_t want = W_DATA_FRAME;
		if (regular) {
			if (off >= size)
				break;
			if ((uint64_t)(size - off) < want)
				want = (size_t)(size - off);
		}
		ssize_t k = 0;
		int r = read_input(c, fd, !regular, buf + W_HEADER, want, &k);
		if (r < 0) { /* the daemon answered in the middle */
			free(buf);
			return r;
		}
		if (r > 0) {
			int err = errno;
			snprintf(msg, sizeof msg, "put: read the file: %s", strerror(err));
			free(buf);
			e = upload_abort(c, OMST_EIO, msg);
			errno = err;
			return e;
		}
		if (k == 0) {
			if (!regular)
				break;
			struct stat st;
			snprintf(msg, sizeof msg, "put: file changed while it was read: it shrank from %lld to %lld bytes",
			         (long long)size, (long long)(fstat(fd, &st) == 0 ? st.st_size : off));
			free(buf);
			return upload_abort(c, OMST_EIO, msg);
		}
		w_put_header(buf, FT_DATA, (uint32_t)k);
		struct iovec iov = {buf, W_HEADER + (size_t)k};
		if ((e = conn_sendv(c, &iov, 1)) != 0) {
			free(buf);
			return upload_failed(c, e);
		}
		off += k;
	}
	if (regular) {
		/* After the last byte: nothing more, and the same size and
		 * modification time as at the start. */
		struct stat st;
		ssize_t k = 0;
		int r = read_input(c, fd, 0, buf, 1, &k);
		if (r == 0 && k > 0)
			snprintf(msg, sizeof msg, "put: file changed while it was read: it grew beyond its %lld bytes",
			         (long long)size);
		else if (r != 0 || fstat(fd, &st) != 0)
			snprintf(msg, sizeof msg, "put: read the file: %s", strerror(errno));
		else if (st.st_size != size || st.st_mtim.tv_sec != st0.st_mtim.tv_sec ||
		         st.st_mtim.tv_nsec != st0.st_mtim.tv_nsec)
			snprintf(msg, sizeof msg,
			         "put: file changed while it was read: size %lld -> %lld bytes, modification time changed",
			         (long long)size, (long long)st.st_size);
		else
			msg[0] = '\0';
		if (msg[0]) {
			free(buf);
			return upload_abort(c, OMST_EIO, msg);
		}
	}
	free(buf);
	uint8_t end[W_HEADER];
	if ((e = conn_send(c, end, w_enc_empty(end, sizeof end, FT_DATA))) != 0)
		return upload_failed(c, e);
	return read_info(c, info);
}

/* write(2) without SIGPIPE: a reader that went away is EPIPE, and the
 * library never raises the signal (it stays blocked in this thread for
 * the call, and a SIGPIPE the write raised is taken back). */
static ssize_t write_nosigpipe(int fd, const void *p, size_t n)
{
	sigset_t sp, old, pending;
	sigemptyset(&sp);
	sigaddset(&sp, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sp, &old);
	sigpending(&pending);
	int was_pending = sigismember(&pending, SIGPIPE);
	ssize_t r = write(fd, p, n);
	int err = errno;
	if (r < 0 && err == EPIPE && !was_pending) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&sp, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return r;
}

/* Writes p[0..n) into the caller's file: at offset off (in_place: pwrite)
 * or in order (a stream, or O_APPEND). Returns 0 or -1 with errno set. */
static int write_output(int fd, int in_place, off_t off, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t r = in_place ? pwrite(fd, p, n, off) : write_nosigpipe(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* A non-blocking stream: wait until it takes more. */
			struct pollfd pf = {fd, POLLOUT, 0};
			while (poll(&pf, 1, -1) < 0 && errno == EINTR)
				;
			continue;
		}
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			return -1;
		}
		p += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

int op_get_stream(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_info_t *info)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return omst_fail(OMST_EIO, "get: stat the file: %s", strerror(errno));
	int fl = fcntl(fd, F_GETFL);
	/* A regular file (not O_APPEND) ends up holding exactly the blob:
	 * written from offset 0, then cut to the blob's size. */
	int in_place = S_ISREG(st.st_mode) && fl >= 0 && !(fl & O_APPEND);
	int e = get_begin(c, FT_GET, name, nlen, info);
	if (e)
		return e;
	size_t cap = W_DATA_FRAME;
	uint8_t *buf = malloc(cap);
	if (buf == NULL) {
		c->broken = 1;
		return omst_fail(OMST_ENOMEM, "out of memory");
	}
	uint64_t got = 0, size = info->size;
	for (;;) {
		uint32_t len;
		uint8_t type;
		const uint8_t *body;
		if ((e = conn_read_header(c, &len, &type)) != 0)
			break;
		if (type == FT_DATA) {
			if (len == 0 || len > size - got) {
				e = conn_break(c, omst_fail(OMST_EPROTO, "daemon sent more than the blob's %llu bytes",
				                            (unsigned long long)size));
				break;
			}
			for (uint32_t left = len; left > 0 && e == 0;) {
				size_t k = left < cap ? left : cap;
				if ((e = conn_read(c, buf, k)) != 0)
					break;
				if (write_output(fd, in_place, (off_t)got, buf, k) != 0) {
					int err = errno;
					/* Dropping the connection cancels the request. */
					e = conn_break(c, omst_fail(OMST_EIO, "get: write to the file: %s", strerror(err)));
					errno = err;
					break;
				}
				got += k;
				left -= (uint32_t)k;
			}
			if (e)
				break;
			continue;
		}
		if (type == FT_END) {
			if ((e = no_fds(c)) == 0 && (len != 0 || got != size))
				e = conn_break(c, omst_fail(OMST_EPROTO, "GET ended after %llu of %llu bytes",
				                            (unsigned long long)got, (unsigned long long)size));
			if (e == 0 && in_place && ftruncate(fd, (off_t)size) != 0) {
				int err = errno;
				e = omst_fail(OMST_EIO, "get: cut the file to %llu bytes: %s", (unsigned long long)size,
				              strerror(err));
				errno = err;
			}
			break;
		}
		if (type == FT_ERROR) {
			if ((e = conn_read_body(c, len, &body)) == 0 && (e = no_fds(c)) == 0)
				e = error_reply(c, body, len);
			break;
		}
		e = unexpected(c, type, "DATA or END");
		break;
	}
	free(buf);
	return e;
}

/* ---- REMOVE_PREFIX, SET_TTL, DU (version 6) ------------------------------ */

/* The thread's last NAMESPACE_JSON reply, NUL-terminated. */
static __thread char *t_json;
static __thread size_t t_jsoncap;

OMST_EXPORT const char *omst_last_json(void)
{
	return t_json ? t_json : "";
}

int op_namespace(struct omst_conn *c, const uint8_t *req, size_t n)
{
	int e = send_frame(c, req, n);
	if (e)
		return e;
	uint32_t len;
	const uint8_t *body;
	if ((e = read_reply(c, FT_NAMESPACE_JSON, "NAMESPACE_JSON", 0, &len, &body)) != 0)
		return e;
	if (len == 0 || body[0] != '{' || memchr(body, 0, len) != NULL)
		return conn_break(c, omst_fail(OMST_EPROTO, "NAMESPACE_JSON of %u bytes is not a JSON object", (unsigned)len));
	if (t_jsoncap < (size_t)len + 1) {
		char *p = realloc(t_json, (size_t)len + 1);
		if (p == NULL)
			return omst_fail(OMST_ENOMEM, "namespace reply: out of memory");
		t_json = p;
		t_jsoncap = (size_t)len + 1;
	}
	memcpy(t_json, body, len);
	t_json[len] = 0;
	return 0;
}

/* The text right after "key": at the top level of the thread's last JSON
 * reply (the daemon's own, compact, json.Marshal'd), or NULL. */
static const char *json_value(const char *key)
{
	if (t_json == NULL)
		return NULL;
	size_t kl = strlen(key);
	int depth = 0, in_str = 0;
	for (const char *p = t_json; *p; p++) {
		if (in_str) {
			if (*p == '\\' && p[1])
				p++;
			else if (*p == '"')
				in_str = 0;
			continue;
		}
		switch (*p) {
		case '{': case '[':
			depth++;
			break;
		case '}': case ']':
			depth--;
			break;
		case '"':
			if (depth == 1 && strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '"' && p[2 + kl] == ':')
				return p + 3 + kl;
			in_str = 1;
			break;
		}
	}
	return NULL;
}

uint64_t json_u64(const char *key)
{
	const char *v = json_value(key);
	if (v == NULL || *v < '0' || *v > '9')
		return 0;
	return strtoull(v, NULL, 10);
}

/* A JSON number, parsed here (strtod follows the locale's decimal point). */
double json_num(const char *key)
{
	const char *v = json_value(key);
	if (v == NULL)
		return 0;
	double sign = 1, x = 0, scale = 1;
	if (*v == '-') {
		sign = -1;
		v++;
	}
	for (; *v >= '0' && *v <= '9'; v++)
		x = x * 10 + (*v - '0');
	if (*v == '.')
		for (v++; *v >= '0' && *v <= '9'; v++) {
			scale /= 10;
			x += (*v - '0') * scale;
		}
	if (*v == 'e' || *v == 'E') {
		v++;
		int esign = 1, ex = 0;
		if (*v == '-' || *v == '+')
			esign = *v++ == '-' ? -1 : 1;
		for (; *v >= '0' && *v <= '9' && ex < 400; v++)
			ex = ex * 10 + (*v - '0');
		for (; ex > 0; ex--)
			x = esign > 0 ? x * 10 : x / 10;
	}
	return sign * x;
}
