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

#include <stdlib.h>
#include <string.h>
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
 * thread's message). */
static int error_reply(struct omst_conn *c, const uint8_t *body, size_t len)
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

/* Reads a reply that is INFO or ERROR. fds_follow: the reply to GET_FD,
 * whose first FDS frame (and its descriptors) may arrive with the INFO. */
static int read_info_fds(struct omst_conn *c, omst_info_t *info, int fds_follow)
{
	uint32_t len;
	uint8_t type;
	const uint8_t *body;
	int e = conn_read_header(c, &len, &type);
	if (e)
		return e;
	if (type != FT_INFO && type != FT_ERROR)
		return unexpected(c, type, "INFO");
	if ((e = conn_read_body(c, len, &body)) != 0)
		return e;
	if ((!fds_follow || type == FT_ERROR) && (e = no_fds(c)) != 0)
		return e;
	if (type == FT_ERROR)
		return error_reply(c, body, len);
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
	if (e) {
		/* The daemon may have answered and closed the connection (for
		 * example BAD_REQUEST): its reply says more than EPIPE. Look for
		 * it briefly; the connection is closed afterwards either way. */
		int timeout = c->timeout_ms;
		omst_info_t tmp;
		c->broken = 0;
		c->timeout_ms = 100;
		int r = read_info(c, &tmp);
		c->timeout_ms = timeout;
		c->broken = 1;
		if (r < 0 && r > OMST_EINVAL && r != OMST_ETIMEDOUT)
			return r; /* a daemon error code */
		return omst_fail(e == OMST_ETIMEDOUT ? e : OMST_ECONN,
		                 "put: connection to the daemon lost during the upload");
	}
	return read_info(c, info);
}

int op_put_file(struct omst_conn *c, const char *name, size_t nlen, uint32_t chunk_size, const char *path,
                size_t plen, omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_put_file(req, sizeof req, name, nlen, chunk_size, path, plen));
	return e ? e : read_info(c, info);
}

int op_get_file(struct omst_conn *c, const char *name, size_t nlen, const char *path, size_t plen,
                omst_info_t *info)
{
	uint8_t req[REQ_MAX];
	int e = send_frame(c, req, w_enc_get_file(req, sizeof req, name, nlen, path, plen));
	return e ? e : read_info(c, info);
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
	uint8_t type;
	const uint8_t *body;
	if ((e = conn_read_header(c, &len, &type)) != 0)
		return e;
	if (type != FT_OK && type != FT_ERROR)
		return unexpected(c, type, "OK");
	if ((e = conn_read_body(c, len, &body)) != 0)
		return e;
	if ((e = no_fds(c)) != 0)
		return e;
	if (type == FT_ERROR)
		return error_reply(c, body, len);
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
