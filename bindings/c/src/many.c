/*
 * many.c: many names in one request (protocol version 7, GET_MANY and
 * PUT_MANY, docs/rpcbridge.md section 6.14): omst_get_many (a callback
 * per entry), omst_get_many_into (the caller's buffers), omst_put_many.
 * On a connection of version 6 or less, one GET or PUT per name.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define MANY_VERSION 7u
#define FT_GET_MANY 0x40
#define FT_PUT_MANY 0x41
#define FT_PUT_ITEM 0x42
#define FT_ENTRY 0x37
#define FT_ENTRY_ERROR 0x38
#define FT_SUMMARY 0x39
#define MANY_MAX_BODY (1u << 20)
#define MANY_MAX_NAMES (1u << 16)

static uint8_t *be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
	return p + 4;
}

static uint8_t *be64(uint8_t *p, uint64_t v)
{
	return be32(be32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What to do with the entries of a GET_MANY. */
struct many_sink {
	/* The buffer for entry i's bytes (NULL: a temporary one), or *err set
	 * (e.g. OMST_ESIZE: the bytes are skipped, the entry fails). */
	uint8_t *(*dest)(void *arg, size_t i, const omst_info_t *info, int *err);
	/* Entry i is complete (status 0, data its bytes) or failed. A non-zero
	 * return stops the call. */
	int (*done)(void *arg, size_t i, int status, const omst_info_t *info, const uint8_t *data, size_t size);
	void *arg;
	size_t failed;
};

/* Decodes ENTRY_ERROR's index and sets the thread's message; returns the
 * entry's code, or OMST_EPROTO. */
static int entry_error(const uint8_t *b, size_t n, uint32_t *index)
{
	if (n < 8)
		return OMST_EPROTO;
	*index = rd32(b);
	uint32_t nl = rd32(b + 4);
	if (nl > n - 8 || n - 8 - nl < 8)
		return OMST_EPROTO;
	uint32_t code;
	struct w_str msg;
	if (w_dec_error(b + 8 + nl, n - 8 - nl, &code, &msg))
		return OMST_EPROTO;
	int e = omst_code_from_wire(code);
	omst_fail_msg(e, (const char *)msg.p, msg.n);
	return e;
}

/* One GET_MANY of names[0..n) (base: their index in the caller's list). */
static int op_get_many(struct omst_conn *c, const char *const *names, size_t base, size_t n, struct many_sink *s)
{
	size_t body = 12;
	for (size_t i = 0; i < n; i++)
		body += 4 + strlen(names[base + i]);
	uint8_t *req = malloc(W_HEADER + body);
	if (req == NULL)
		return omst_fail(OMST_ENOMEM, "get many: out of memory");
	w_put_header(req, FT_GET_MANY, (uint32_t)body);
	uint8_t *p = be32(be32(be32(req + W_HEADER, 0), 0), (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(names[base + i]);
		p = be32(p, (uint32_t)l);
		memcpy(p, names[base + i], l);
		p += l;
	}
	c->used = 1;
	int e = conn_send(c, req, W_HEADER + body);
	free(req);
	if (e)
		return e;
	int first = 1;
	for (;;) {
		uint32_t len;
		uint8_t type;
		const uint8_t *b;
		if ((e = conn_read_header(c, &len, &type)) != 0)
			return e;
		if (type != FT_ENTRY && type != FT_ENTRY_ERROR && type != FT_SUMMARY && !(type == FT_ERROR && first))
			return conn_break(c, omst_fail(OMST_EPROTO, "get many: daemon sent frame type 0x%02x", type));
		if ((e = conn_read_body(c, len, &b)) != 0)
			return e;
		if (type == FT_ERROR) {
			return error_reply(c, b, len);
		}
		first = 0;
		if (type == FT_SUMMARY) {
			if (len != 20)
				return conn_break(c, omst_fail(OMST_EPROTO, "malformed SUMMARY frame"));
			return 0;
		}
		uint32_t index;
		if (type == FT_ENTRY_ERROR) {
			int code = entry_error(b, len, &index);
			if (code == OMST_EPROTO || index >= n)
				return conn_break(c, omst_fail(OMST_EPROTO, "malformed ENTRY_ERROR frame"));
			s->failed++;
			if ((e = s->done(s->arg, base + index, code, NULL, NULL, 0)) != 0)
				return conn_break(c, e);
			continue;
		}
		struct w_info in;
		omst_info_t info;
		if (len < 4 || w_dec_info(b + 4, len - 4, &in) || w_info_export(&in, &info) || (index = rd32(b)) >= n)
			return conn_break(c, omst_fail(OMST_EPROTO, "malformed ENTRY frame"));
		int status = 0;
		uint8_t *dst = s->dest(s->arg, base + index, &info, &status);
		uint8_t *tmp = NULL;
		if (status == 0 && dst == NULL && info.size > 0) {
			if ((tmp = malloc((size_t)info.size)) == NULL)
				return conn_break(c, omst_fail(OMST_ENOMEM, "get many: out of memory"));
			dst = tmp;
		}
		uint64_t got = 0;
		while (got < info.size) {
			if ((e = conn_read_header(c, &len, &type)) != 0)
				break;
			if (type == FT_DATA && len > 0 && len <= info.size - got) {
				e = status == 0 ? conn_read(c, dst + got, len) : conn_skip(c, len);
				if (e)
					break;
				got += len;
				continue;
			}
			uint32_t j;
			if (type != FT_ENTRY_ERROR || (e = conn_read_body(c, len, &b)) != 0 ||
			    (status = entry_error(b, len, &j)) == OMST_EPROTO || j != index) {
				e = conn_break(c, omst_fail(OMST_EPROTO, "get many: frame 0x%02x in the bytes of entry %u", type,
				                            (unsigned)index));
				break;
			}
			break;
		}
		if (e) {
			free(tmp);
			return e;
		}
		if (status)
			s->failed++;
		e = s->done(s->arg, base + index, status, &info, status ? NULL : dst, status ? 0 : (size_t)info.size);
		free(tmp);
		if (e)
			return conn_break(c, e);
	}
}

/* Entries one by one on an older daemon. */
static int op_get_each(struct omst_conn *c, const char *const *names, size_t n, struct many_sink *s)
{
	for (size_t i = 0; i < n; i++) {
		omst_info_t info;
		int st = op_stat(c, names[i], strlen(names[i]), &info);
		uint8_t *dst = NULL, *tmp = NULL;
		if (st == 0) {
			dst = s->dest(s->arg, i, &info, &st);
			if (st == 0 && dst == NULL && (tmp = dst = malloc(info.size ? (size_t)info.size : 1)) == NULL)
				return omst_fail(OMST_ENOMEM, "get many: out of memory");
		}
		if (st == 0)
			st = op_get(c, names[i], strlen(names[i]), dst, (size_t)info.size, &info);
		if (c->broken) {
			free(tmp);
			return st ? st : OMST_ECONN;
		}
		if (st)
			s->failed++;
		int e = s->done(s->arg, i, st, st ? NULL : &info, st ? NULL : dst, st ? 0 : (size_t)info.size);
		free(tmp);
		if (e)
			return e;
	}
	return 0;
}

static int check_names(const char *const *names, size_t n)
{
	if (names == NULL && n > 0)
		return omst_fail(OMST_EINVAL, "get many: names is NULL");
	for (size_t i = 0; i < n; i++) {
		size_t l;
		int e = omst_check_name(names[i], &l);
		if (e)
			return omst_fail(e, "get many: name %zu: %s", i, omst_errmsg());
	}
	return 0;
}

static int run_many(omst_t *h, const char *const *names, size_t n, struct many_sink *s)
{
	struct omst_conn *c;
	int e = handle_acquire(h, &c);
	if (e)
		return e;
	if (c->version < MANY_VERSION) {
		e = op_get_each(c, names, n, s);
	} else {
		for (size_t start = 0; start < n && e == 0;) {
			size_t end = start, body = 12;
			while (end < n && end - start < MANY_MAX_NAMES && body + 4 + strlen(names[end]) <= MANY_MAX_BODY)
				body += 4 + strlen(names[end++]);
			e = op_get_many(c, names, start, end - start, s);
			start = end;
		}
	}
	handle_release(h, c);
	return e;
}

/* ---- callback form ------------------------------------------------------ */

struct cb_arg {
	const char *const *names;
	omst_entry_cb cb;
	void *arg;
};

static uint8_t *cb_dest(void *arg, size_t i, const omst_info_t *info, int *err)
{
	(void)arg, (void)i, (void)info, (void)err;
	return NULL;
}

static int cb_done(void *arg, size_t i, int status, const omst_info_t *info, const uint8_t *data, size_t size)
{
	struct cb_arg *a = arg;
	omst_entry_t e = {.index = i, .name = a->names[i], .status = status, .info = info};
	return a->cb(a->arg, &e, data, size);
}

OMST_EXPORT int omst_get_many(omst_t *h, const char *const *names, size_t n, omst_entry_cb cb, void *arg, size_t *failed)
{
	if (h == NULL || cb == NULL)
		return omst_fail(OMST_EINVAL, "get many: NULL handle or callback");
	int e = check_names(names, n);
	if (e)
		return e;
	struct cb_arg a = {names, cb, arg};
	struct many_sink s = {cb_dest, cb_done, &a, 0};
	e = run_many(h, names, n, &s);
	if (failed)
		*failed = s.failed;
	return e;
}

/* ---- caller buffers ------------------------------------------------------ */

struct into_arg {
	void *const *bufs;
	const size_t *sizes;
	int *status;
};

static uint8_t *into_dest(void *arg, size_t i, const omst_info_t *info, int *err)
{
	struct into_arg *a = arg;
	if (info->size != a->sizes[i]) {
		*err = omst_fail(OMST_ESIZE, "\"%s\" has %llu bytes, not %zu", info->name, (unsigned long long)info->size,
		                 a->sizes[i]);
		return NULL;
	}
	return a->bufs[i];
}

static int into_done(void *arg, size_t i, int status, const omst_info_t *info, const uint8_t *data, size_t size)
{
	(void)info, (void)data, (void)size;
	struct into_arg *a = arg;
	a->status[i] = status;
	return 0;
}

OMST_EXPORT int omst_get_many_into(omst_t *h, const char *const *names, size_t n, void *const *bufs, const size_t *sizes,
                                   int *status, size_t *failed)
{
	if (h == NULL || (n > 0 && (bufs == NULL || sizes == NULL || status == NULL)))
		return omst_fail(OMST_EINVAL, "get many: NULL argument");
	int e = check_names(names, n);
	if (e)
		return e;
	for (size_t i = 0; i < n; i++) {
		if (bufs[i] == NULL && sizes[i] > 0)
			return omst_fail(OMST_EINVAL, "get many: buffer %zu is NULL", i);
		status[i] = OMST_ECONN; /* until its entry arrives */
	}
	struct into_arg a = {bufs, sizes, status};
	struct many_sink s = {into_dest, into_done, &a, 0};
	e = run_many(h, names, n, &s);
	if (failed) {
		*failed = 0;
		for (size_t i = 0; i < n; i++)
			*failed += status[i] != 0;
	}
	return e;
}

/* ---- PUT_MANY ------------------------------------------------------------ */

static int op_put_many(struct omst_conn *c, const char *const *names, const void *const *data, const size_t *sizes,
                       size_t n, uint32_t chunk_size, int *status, omst_info_t *infos)
{
	uint8_t head[W_HEADER + 4];
	w_put_header(head, FT_PUT_MANY, 4);
	be32(head + W_HEADER, chunk_size);
	c->used = 1;
	int e = conn_send(c, head, sizeof head);
	for (size_t i = 0; i < n && e == 0; i++) {
		uint8_t item[W_HEADER + 4 + OMST_NAME_MAX + 8 + W_HEADER];
		size_t l = strlen(names[i]);
		w_put_header(item, FT_PUT_ITEM, (uint32_t)(4 + l + 8));
		uint8_t *p = be32(item + W_HEADER, (uint32_t)l);
		memcpy(p, names[i], l);
		p = be64(p + l, sizes[i]);
		size_t hn = (size_t)(p - item);
		const uint8_t *d = data[i];
		size_t left = sizes[i];
		if (left == 0)
			e = conn_send(c, item, hn);
		while (left > 0 && e == 0) {
			size_t k = left < W_DATA_FRAME ? left : W_DATA_FRAME;
			w_put_header(item + hn, FT_DATA, (uint32_t)k);
			struct iovec iov[2] = {{item, hn + W_HEADER}, {(void *)d, k}};
			e = conn_sendv(c, iov, 2);
			memmove(item, item + hn, W_HEADER);
			hn = 0;
			d += k;
			left -= k;
		}
	}
	if (e == 0) {
		uint8_t end[W_HEADER];
		e = conn_send(c, end, w_enc_empty(end, sizeof end, FT_DATA));
	}
	if (e)
		return e;
	for (size_t i = 0; i < n; i++)
		status[i] = OMST_ECONN;
	int first = 1;
	for (;;) {
		uint32_t len, index;
		uint8_t type;
		const uint8_t *b;
		if ((e = conn_read_header(c, &len, &type)) != 0)
			return e;
		if ((e = conn_read_body(c, len, &b)) != 0)
			return e;
		if (type == FT_ERROR && first) {
			return error_reply(c, b, len);
		}
		first = 0;
		if (type == FT_SUMMARY)
			return len == 20 ? 0 : conn_break(c, omst_fail(OMST_EPROTO, "malformed SUMMARY frame"));
		if (type == FT_ENTRY_ERROR) {
			int code = entry_error(b, len, &index);
			if (code == OMST_EPROTO || index >= n)
				return conn_break(c, omst_fail(OMST_EPROTO, "malformed ENTRY_ERROR frame"));
			status[index] = code;
			continue;
		}
		struct w_info in;
		omst_info_t info;
		if (type != FT_ENTRY || len < 4 || w_dec_info(b + 4, len - 4, &in) || w_info_export(&in, &info) ||
		    (index = rd32(b)) >= n)
			return conn_break(c, omst_fail(OMST_EPROTO, "put many: bad frame 0x%02x", type));
		status[index] = 0;
		if (infos)
			infos[index] = info;
	}
}

OMST_EXPORT int omst_put_many(omst_t *h, const char *const *names, const void *const *data, const size_t *sizes,
                              size_t n, uint32_t chunk_size, int *status, omst_info_t *infos, size_t *failed)
{
	if (h == NULL || (n > 0 && (data == NULL || sizes == NULL || status == NULL)))
		return omst_fail(OMST_EINVAL, "put many: NULL argument");
	int e = check_names(names, n);
	if (e == 0)
		e = omst_check_chunk_size(chunk_size);
	if (e)
		return e;
	for (size_t i = 0; i < n; i++)
		if (data[i] == NULL && sizes[i] > 0)
			return omst_fail(OMST_EINVAL, "put many: data %zu is NULL", i);
	struct omst_conn *c;
	if ((e = handle_acquire(h, &c)) != 0)
		return e;
	if (c->version < MANY_VERSION) {
		for (size_t i = 0; i < n && !c->broken; i++) {
			omst_info_t tmp;
			status[i] = op_put(c, names[i], strlen(names[i]), data[i], sizes[i], chunk_size, infos ? &infos[i] : &tmp);
		}
		if (c->broken)
			e = OMST_ECONN;
	} else {
		e = op_put_many(c, names, data, sizes, n, chunk_size, status, infos);
	}
	handle_release(h, c);
	if (failed) {
		*failed = 0;
		for (size_t i = 0; i < n; i++)
			*failed += status[i] != 0;
	}
	return e;
}
