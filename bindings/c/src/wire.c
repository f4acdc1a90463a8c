/*
 * wire.c: frame encoding and decoding (docs/rpcbridge.md sections 2 to 6).
 * Pure functions over byte arrays: no IO, no allocation, no global state.
 * Decoders never read past the body they are given and reject trailing
 * bytes.
 */
#include "internal.h"

#include <string.h>

/* ---- primitives ----------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

void w_put_header(uint8_t *h, uint8_t type, uint32_t len)
{
	put_u32(h, len);
	h[4] = type;
	h[5] = h[6] = h[7] = 0;
}

int w_parse_header(const uint8_t *h, uint32_t *len, uint8_t *type)
{
	if (h[5] != 0 || h[6] != 0 || h[7] != 0)
		return OMST_EPROTO;
	*len = get_u32(h);
	*type = h[4];
	if (*len > W_MAX_BODY)
		return OMST_EPROTO;
	return 0;
}

int w_known_type(uint8_t t)
{
	switch (t) {
	case FT_HELLO: case FT_PUT: case FT_PUT_FILE: case FT_GET: case FT_GET_FILE: case FT_STAT:
	case FT_LIST: case FT_REMOVE: case FT_STATUS: case FT_GET_FD: case FT_PUT_FD: case FT_GET_TO_FD:
	case FT_DATA: case FT_ABORT:
	case FT_END: case FT_FDS: case FT_OK: case FT_INFO: case FT_LISTING: case FT_STATUS_JSON:
	case FT_REMOVE_PREFIX: case FT_SET_TTL: case FT_DU: case FT_NAMESPACE_JSON:
	case FT_PROGRESS: case FT_ERROR:
		return 1;
	}
	return 0;
}

/* ---- encoders ------------------------------------------------------------- */

/* An encoder appends to out[0..cap); ok turns 0 on overflow. */
struct enc {
	uint8_t *out;
	size_t cap, n;
	int ok;
};

static void e_bytes(struct enc *e, const void *p, size_t n)
{
	if (!e->ok || n > e->cap - e->n) {
		e->ok = 0;
		return;
	}
	if (n)
		memcpy(e->out + e->n, p, n);
	e->n += n;
}

static void e_u32(struct enc *e, uint32_t v)
{
	uint8_t b[4];
	put_u32(b, v);
	e_bytes(e, b, 4);
}

static void e_str(struct enc *e, const char *s, size_t n)
{
	if (n > UINT32_MAX) {
		e->ok = 0;
		return;
	}
	e_u32(e, (uint32_t)n);
	e_bytes(e, s, n);
}

/* Starts a frame: reserves the header. */
static struct enc e_begin(uint8_t *out, size_t cap)
{
	struct enc e = {out, cap, 0, cap >= W_HEADER};
	if (e.ok)
		e.n = W_HEADER;
	return e;
}

/* Finishes a frame: writes the header, returns the frame length or 0. */
static size_t e_end(struct enc *e, uint8_t type)
{
	if (!e->ok || e->n - W_HEADER > W_MAX_BODY)
		return 0;
	w_put_header(e->out, type, (uint32_t)(e->n - W_HEADER));
	return e->n;
}

size_t w_enc_hello(uint8_t *out, size_t cap, uint32_t version)
{
	struct enc e = e_begin(out, cap);
	e_bytes(&e, "OMST", 4);
	e_u32(&e, version);
	return e_end(&e, FT_HELLO);
}

static size_t enc_put(uint8_t *out, size_t cap, uint8_t type, const char *name, size_t nlen, uint32_t chunk_size)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, name, nlen);
	e_u32(&e, chunk_size);
	return e_end(&e, type);
}

size_t w_enc_put(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size)
{
	return enc_put(out, cap, FT_PUT, name, nlen, chunk_size);
}

size_t w_enc_put_fd(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size)
{
	return enc_put(out, cap, FT_PUT_FD, name, nlen, chunk_size);
}

size_t w_enc_put_file(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size,
                      const char *path, size_t plen)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, name, nlen);
	e_u32(&e, chunk_size);
	e_str(&e, path, plen);
	return e_end(&e, FT_PUT_FILE);
}

size_t w_enc_name_req(uint8_t *out, size_t cap, uint8_t type, const char *name, size_t nlen)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, name, nlen);
	return e_end(&e, type);
}

size_t w_enc_get_file(uint8_t *out, size_t cap, const char *name, size_t nlen, const char *path,
                      size_t plen)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, name, nlen);
	e_str(&e, path, plen);
	return e_end(&e, FT_GET_FILE);
}

size_t w_enc_remove_prefix(uint8_t *out, size_t cap, const char *prefix, size_t plen, uint32_t flags)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, prefix, plen);
	e_u32(&e, flags);
	return e_end(&e, FT_REMOVE_PREFIX);
}

size_t w_enc_set_ttl(uint8_t *out, size_t cap, const char *scope, size_t slen, uint64_t ttl)
{
	struct enc e = e_begin(out, cap);
	e_str(&e, scope, slen);
	e_u32(&e, (uint32_t)(ttl >> 32));
	e_u32(&e, (uint32_t)ttl);
	return e_end(&e, FT_SET_TTL);
}

size_t w_enc_empty(uint8_t *out, size_t cap, uint8_t type)
{
	struct enc e = e_begin(out, cap);
	return e_end(&e, type);
}

size_t w_enc_data(uint8_t *out, size_t cap, const void *payload, size_t n)
{
	struct enc e = e_begin(out, cap);
	e_bytes(&e, payload, n);
	return e_end(&e, FT_DATA);
}

/* ---- decoders ------------------------------------------------------------- */

/* A decoder consumes b[0..n); the first error sticks. */
struct dec {
	const uint8_t *p;
	size_t n;
	int err;
};

static uint32_t d_u32(struct dec *d)
{
	if (d->err || d->n < 4) {
		d->err = 1;
		return 0;
	}
	uint32_t v = get_u32(d->p);
	d->p += 4;
	d->n -= 4;
	return v;
}

static uint64_t d_u64(struct dec *d)
{
	if (d->err || d->n < 8) {
		d->err = 1;
		return 0;
	}
	uint64_t v = get_u64(d->p);
	d->p += 8;
	d->n -= 8;
	return v;
}

static struct w_str d_str(struct dec *d)
{
	struct w_str s = {NULL, 0};
	uint32_t n = d_u32(d);
	if (d->err)
		return s;
	if (n > d->n) {
		d->err = 1;
		return s;
	}
	s.p = d->p;
	s.n = n;
	d->p += n;
	d->n -= n;
	return s;
}

static int d_end(struct dec *d)
{
	return d->err || d->n != 0 ? OMST_EPROTO : 0;
}

static void d_info(struct dec *d, struct w_info *in)
{
	in->name = d_str(d);
	in->id = d_str(d);
	in->size = d_u64(d);
	in->chunk_size = d_u32(d);
	in->chunks = d_u32(d);
	in->time = (int64_t)d_u64(d);
	in->origin = d_str(d);
	in->flags = d_u32(d);
}

int w_dec_hello(const uint8_t *b, size_t n, uint8_t magic[4], uint32_t *version)
{
	if (n < 4 || memcmp(b, "OMST", 4) != 0)
		return OMST_EPROTO;
	memcpy(magic, b, 4);
	struct dec d = {b + 4, n - 4, 0};
	*version = d_u32(&d);
	return d_end(&d);
}

int w_dec_info(const uint8_t *b, size_t n, struct w_info *in)
{
	struct dec d = {b, n, 0};
	d_info(&d, in);
	return d_end(&d);
}

int w_dec_error(const uint8_t *b, size_t n, uint32_t *code, struct w_str *msg)
{
	struct dec d = {b, n, 0};
	*code = d_u32(&d);
	*msg = d_str(&d);
	if (!d.err && *code == 0)
		return OMST_EPROTO; /* code 0 is never sent */
	return d_end(&d);
}

int w_dec_fds(const uint8_t *b, size_t n, uint32_t *count, struct w_extent *ext)
{
	struct dec d = {b, n, 0};
	uint32_t c = d_u32(&d);
	if (d.err || c < 1 || c > W_MAX_EXTENTS || d.n != (size_t)c * W_EXTENT)
		return OMST_EPROTO;
	for (uint32_t i = 0; i < c; i++) {
		ext[i].blob_offset = d_u64(&d);
		ext[i].length = d_u64(&d);
		ext[i].file_offset = d_u64(&d);
		if (ext[i].length == 0)
			return OMST_EPROTO;
	}
	*count = c;
	return d_end(&d);
}

int w_dec_listing(const uint8_t *b, size_t n, uint32_t *count, struct w_info *out, size_t cap)
{
	struct dec d = {b, n, 0};
	uint32_t c = d_u32(&d);
	if (d.err || (uint64_t)c * W_MIN_INFO > d.n)
		return OMST_EPROTO;
	for (uint32_t i = 0; i < c && !d.err; i++) {
		struct w_info in;
		d_info(&d, &in);
		if (i < cap)
			out[i] = in;
	}
	*count = c;
	return d_end(&d);
}

int w_dec_put(const uint8_t *b, size_t n, struct w_str *name, uint32_t *chunk_size)
{
	struct dec d = {b, n, 0};
	*name = d_str(&d);
	*chunk_size = d_u32(&d);
	return d_end(&d);
}

int w_dec_remove_prefix(const uint8_t *b, size_t n, struct w_str *prefix, uint32_t *flags)
{
	struct dec d = {b, n, 0};
	*prefix = d_str(&d);
	*flags = d_u32(&d);
	int e = d_end(&d);
	if (e == 0 && (*flags & ~(uint32_t)OMST_EVERYWHERE) != 0)
		return OMST_EPROTO;
	return e;
}

/* A TTL is at most a year (namespace.MaxTTL). */
#define W_MAX_TTL (365ull * 24 * 3600 * 1000000000ull)

int w_dec_set_ttl(const uint8_t *b, size_t n, struct w_str *scope, uint64_t *ttl)
{
	struct dec d = {b, n, 0};
	*scope = d_str(&d);
	*ttl = d_u64(&d);
	int e = d_end(&d);
	if (e == 0 && *ttl > W_MAX_TTL)
		return OMST_EPROTO;
	return e;
}

int w_dec_put_file(const uint8_t *b, size_t n, struct w_str *name, uint32_t *chunk_size, struct w_str *path)
{
	struct dec d = {b, n, 0};
	*name = d_str(&d);
	*chunk_size = d_u32(&d);
	*path = d_str(&d);
	return d_end(&d);
}

int w_dec_name_req(const uint8_t *b, size_t n, struct w_str *name)
{
	struct dec d = {b, n, 0};
	*name = d_str(&d);
	return d_end(&d);
}

int w_dec_get_file(const uint8_t *b, size_t n, struct w_str *name, struct w_str *path)
{
	struct dec d = {b, n, 0};
	*name = d_str(&d);
	*path = d_str(&d);
	return d_end(&d);
}

int w_dec_empty(const uint8_t *b, size_t n)
{
	(void)b;
	return n == 0 ? 0 : OMST_EPROTO;
}

int w_dec_progress(const uint8_t *b, size_t n, uint64_t *done)
{
	if (n != 8)
		return OMST_EPROTO;
	*done = get_u64(b);
	return 0;
}

int w_check_body(uint8_t type, const uint8_t *b, size_t n)
{
	uint8_t magic[4];
	uint32_t u, count;
	struct w_str s, s2;
	struct w_info in;
	struct w_extent ext[W_MAX_EXTENTS];

	if (n > W_MAX_BODY)
		return OMST_EPROTO;
	switch (type) {
	case FT_HELLO:
		return w_dec_hello(b, n, magic, &u);
	case FT_PUT: case FT_PUT_FD:
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_put(b, n, &s, &u);
	case FT_PUT_FILE:
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_put_file(b, n, &s, &u, &s2);
	case FT_GET: case FT_STAT: case FT_LIST: case FT_REMOVE: case FT_GET_FD: case FT_GET_TO_FD: case FT_DU:
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_name_req(b, n, &s);
	case FT_REMOVE_PREFIX:
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_remove_prefix(b, n, &s, &u);
	case FT_SET_TTL: {
		uint64_t ttl;
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_set_ttl(b, n, &s, &ttl);
	}
	case FT_GET_FILE:
		return n > W_MAX_REQ_BODY ? OMST_EPROTO : w_dec_get_file(b, n, &s, &s2);
	case FT_STATUS: case FT_ABORT: case FT_END: case FT_OK:
		return w_dec_empty(b, n);
	case FT_DATA: case FT_STATUS_JSON: case FT_NAMESPACE_JSON:
		return 0;
	case FT_FDS:
		return w_dec_fds(b, n, &count, ext);
	case FT_INFO:
		return w_dec_info(b, n, &in);
	case FT_LISTING:
		return w_dec_listing(b, n, &count, NULL, 0);
	case FT_ERROR:
		return w_dec_error(b, n, &u, &s);
	case FT_PROGRESS: {
		uint64_t done;
		return w_dec_progress(b, n, &done);
	}
	}
	return OMST_EPROTO;
}

/* ---- export to the public struct ------------------------------------------ */

/* Copies s into dst (cap bytes with the NUL), cutting at a UTF-8 boundary. */
static void copy_trunc(char *dst, size_t cap, struct w_str s)
{
	size_t n = s.n;
	if (n > cap - 1) {
		n = cap - 1;
		while (n > 0 && (s.p[n] & 0xC0) == 0x80)
			n--;
	}
	if (n)
		memcpy(dst, s.p, n);
	dst[n] = '\0';
}

int w_info_export(const struct w_info *in, omst_info_t *out)
{
	if (in->name.n > OMST_NAME_MAX)
		return OMST_EPROTO;
	memcpy(out->name, in->name.p, in->name.n);
	out->name[in->name.n] = '\0';
	copy_trunc(out->id, sizeof out->id, in->id);
	copy_trunc(out->origin, sizeof out->origin, in->origin);
	out->size = in->size;
	out->chunk_size = in->chunk_size;
	out->chunks = in->chunks;
	out->time_ns = in->time;
	out->flags = in->flags;
	return 0;
}
