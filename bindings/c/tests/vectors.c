/*
 * vectors.c: checks the library's encoders and decoders against the shared
 * test vectors (testdata/rpcbridge/frames.txt, and frames-v8.txt of
 * version 8's PROGRESS; docs/rpcbridge.md section 11): every valid vector of a type the client receives is decoded and its
 * fields compared; every valid vector of a type the client sends is
 * encoded from its fields and the bytes compared; every invalid vector is
 * rejected (header check, then the body decoder of the header's type).
 * Each valid vector is then mutated at random (seeded) 1000 times and the
 * decoders must decode or reject every mutation (a fuzz pass; run it under
 * `make test-asan` to catch overreads).
 */
#include "harness.h"
#include "internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OMST_VECTORS_PATH
#define OMST_VECTORS_PATH "../../testdata/rpcbridge/frames.txt"
#endif
#ifndef OMST_VECTORS_V8_PATH
#define OMST_VECTORS_V8_PATH "../../testdata/rpcbridge/frames-v8.txt"
#endif

struct kv {
	char *k, *v;
};

struct vec {
	char *name;
	int line;
	int valid;
	char *why;
	uint8_t *frame;
	size_t n, cap;
	int type;
	struct kv *f;
	size_t nf;
};

/* Decoded fields, as "KEY VALUE" pairs, to compare with a vector's. */
struct out {
	struct kv f[256];
	size_t n;
};

static void add(struct out *o, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(struct out *o, const char *k, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (o->n < 256) {
		o->f[o->n].k = strdup(k);
		o->f[o->n].v = strdup(buf);
		o->n++;
	}
}

static void add_str(struct out *o, const char *k, struct w_str s)
{
	add(o, k, "%.*s", (int)s.n, (const char *)s.p);
}

static void add_info(struct out *o, const struct w_info *in)
{
	add_str(o, "info.name", in->name);
	add_str(o, "info.id", in->id);
	add(o, "info.size", "%" PRIu64, in->size);
	add(o, "info.chunk_size", "%" PRIu32, in->chunk_size);
	add(o, "info.chunks", "%" PRIu32, in->chunks);
	add(o, "info.time", "%" PRId64, in->time);
	add_str(o, "info.origin", in->origin);
	add(o, "info.flags", "%" PRIu32, in->flags);
}

static char *hexstr(const uint8_t *p, size_t n)
{
	char *s = malloc(2 * n + 1);
	for (size_t i = 0; i < n; i++)
		sprintf(s + 2 * i, "%02x", p[i]);
	s[2 * n] = '\0';
	return s;
}

static int unhex(const char *s, uint8_t *out, size_t *n)
{
	size_t l = strlen(s);
	if (l % 2)
		return -1;
	for (size_t i = 0; i < l; i += 2) {
		unsigned v;
		if (sscanf(s + i, "%2x", &v) != 1)
			return -1;
		out[(*n)++] = (uint8_t)v;
	}
	return 0;
}

static const char *field(const struct vec *v, const char *k)
{
	for (size_t i = 0; i < v->nf; i++)
		if (strcmp(v->f[i].k, k) == 0)
			return v->f[i].v;
	return NULL;
}

static uint32_t field_u32(const struct vec *v, const char *k)
{
	const char *s = field(v, k);
	return s ? (uint32_t)strtoul(s, NULL, 10) : 0;
}

/* Decodes a received frame body into fields; returns 0 or an error. */
static int decode(uint8_t type, const uint8_t *b, size_t n, struct out *o)
{
	uint8_t magic[4];
	uint32_t u, count;
	struct w_str s;
	struct w_info in, list[16];
	struct w_extent ext[W_MAX_EXTENTS];
	char *h;
	int e;
	switch (type) {
	case FT_HELLO:
		if ((e = w_dec_hello(b, n, magic, &u)) != 0)
			return e;
		add(o, "magic", "%.4s", (const char *)magic);
		add(o, "version", "%" PRIu32, u);
		return 0;
	case FT_INFO:
		if ((e = w_dec_info(b, n, &in)) != 0)
			return e;
		add_info(o, &in);
		return 0;
	case FT_LISTING:
		if ((e = w_dec_listing(b, n, &count, list, 16)) != 0)
			return e;
		add(o, "count", "%" PRIu32, count);
		for (uint32_t i = 0; i < count && i < 16; i++)
			add_info(o, &list[i]);
		return 0;
	case FT_ERROR:
		if ((e = w_dec_error(b, n, &u, &s)) != 0)
			return e;
		add(o, "code", "%" PRIu32, u);
		add_str(o, "message", s);
		return 0;
	case FT_FDS:
		if ((e = w_dec_fds(b, n, &count, ext)) != 0)
			return e;
		add(o, "count", "%" PRIu32, count);
		for (uint32_t i = 0; i < count; i++) {
			add(o, "extent.blob_offset", "%" PRIu64, ext[i].blob_offset);
			add(o, "extent.length", "%" PRIu64, ext[i].length);
			add(o, "extent.file_offset", "%" PRIu64, ext[i].file_offset);
		}
		return 0;
	case FT_DATA:
		h = hexstr(b, n);
		add(o, "payload", "%s", h);
		free(h);
		return 0;
	case FT_STATUS_JSON: case FT_NAMESPACE_JSON:
		add(o, "json", "%.*s", (int)n, (const char *)b);
		return 0;
	case FT_END:
	case FT_OK:
		return w_dec_empty(b, n);
	case FT_PROGRESS: {
		uint64_t done;
		if ((e = w_dec_progress(b, n, &done)) != 0)
			return e;
		add(o, "done", "%" PRIu64, done);
		return 0;
	}
	}
	return -1000; /* not a type the client receives */
}

/* Encodes a sent frame from the vector's fields; returns its length or 0,
 * or (size_t)-1 if the client does not send this type. */
static size_t encode(const struct vec *v, uint8_t *out, size_t cap)
{
	const char *name = field(v, "name"), *path = field(v, "path");
	size_t nl = name ? strlen(name) : 0, pl = path ? strlen(path) : 0;
	uint8_t payload[4096];
	size_t pn = 0;
	switch (v->type) {
	case FT_HELLO:
		return w_enc_hello(out, cap, field_u32(v, "version"));
	case FT_PUT:
		return w_enc_put(out, cap, name, nl, field_u32(v, "chunk_size"));
	case FT_PUT_FD:
		return w_enc_put_fd(out, cap, name, nl, field_u32(v, "chunk_size"));
	case FT_PUT_FILE:
		return w_enc_put_file(out, cap, name, nl, field_u32(v, "chunk_size"), path, pl);
	case FT_GET: case FT_STAT: case FT_REMOVE: case FT_GET_FD: case FT_GET_TO_FD:
		return w_enc_name_req(out, cap, (uint8_t)v->type, name, nl);
	case FT_LIST: {
		const char *p = field(v, "prefix");
		return w_enc_name_req(out, cap, FT_LIST, p, p ? strlen(p) : 0);
	}
	case FT_GET_FILE:
		return w_enc_get_file(out, cap, name, nl, path, pl);
	case FT_REMOVE_PREFIX: case FT_DU: {
		const char *p = field(v, "prefix");
		size_t plen = p ? strlen(p) : 0;
		if (v->type == FT_DU)
			return w_enc_name_req(out, cap, FT_DU, p, plen);
		return w_enc_remove_prefix(out, cap, p, plen, field_u32(v, "flags"));
	}
	case FT_SET_TTL: {
		const char *sc = field(v, "scope"), *t = field(v, "ttl");
		return w_enc_set_ttl(out, cap, sc, sc ? strlen(sc) : 0, t ? strtoull(t, NULL, 10) : 0);
	}
	case FT_STATUS: case FT_ABORT:
		return w_enc_empty(out, cap, (uint8_t)v->type);
	case FT_DATA: {
		const char *p = field(v, "payload");
		if (p && unhex(p, payload, &pn))
			return 0;
		return pn ? w_enc_data(out, cap, payload, pn) : w_enc_empty(out, cap, FT_DATA);
	}
	}
	return (size_t)-1;
}

/* Checks one vector; returns 1 if it is as expected. */
static int check(const struct vec *v)
{
	uint32_t len = 0;
	uint8_t type = 0;
	int hdr_ok = v->n >= W_HEADER && w_parse_header(v->frame, &len, &type) == 0 &&
	             (size_t)len == v->n - W_HEADER && w_known_type(type);
	if (!v->valid) {
		if (hdr_ok && w_check_body(type, v->frame + W_HEADER, len) == 0) {
			t_fail(__FILE__, v->line, "vector %s (%s) was accepted", v->name, v->why);
			return 0;
		}
		return 1;
	}
	if (!hdr_ok || type != v->type) {
		t_fail(__FILE__, v->line, "vector %s: header rejected or type %u != %d", v->name, type, v->type);
		return 0;
	}
	const uint8_t *body = v->frame + W_HEADER;
	if (w_check_body(type, body, len) != 0) {
		t_fail(__FILE__, v->line, "vector %s: body rejected", v->name);
		return 0;
	}
	int ok = 1, did = 0;
	struct out o = {.n = 0};
	int e = decode(type, body, len, &o);
	if (e != -1000) {
		did = 1;
		if (e != 0) {
			t_fail(__FILE__, v->line, "vector %s: decode failed", v->name);
			ok = 0;
		} else if (o.n != v->nf) {
			t_fail(__FILE__, v->line, "vector %s: decoded %zu fields, vector has %zu", v->name, o.n, v->nf);
			ok = 0;
		} else {
			for (size_t i = 0; i < o.n; i++) {
				if (strcmp(o.f[i].k, v->f[i].k) != 0 || strcmp(o.f[i].v, v->f[i].v) != 0) {
					t_fail(__FILE__, v->line, "vector %s: field %zu decoded as \"%s %s\", want \"%s %s\"",
					       v->name, i, o.f[i].k, o.f[i].v, v->f[i].k, v->f[i].v);
					ok = 0;
				}
			}
		}
		for (size_t i = 0; i < o.n; i++) {
			free(o.f[i].k);
			free(o.f[i].v);
		}
	}
	uint8_t *enc = malloc(v->n + 64);
	size_t n = encode(v, enc, v->n + 64);
	if (n != (size_t)-1) {
		did = 1;
		if (n != v->n || memcmp(enc, v->frame, n) != 0) {
			char *a = hexstr(enc, n), *b = hexstr(v->frame, v->n);
			t_fail(__FILE__, v->line, "vector %s: encoded %s, want %s", v->name, a, b);
			free(a);
			free(b);
			ok = 0;
		}
	}
	free(enc);
	if (!did) {
		t_fail(__FILE__, v->line, "vector %s: type %d neither sent nor received by the client", v->name, v->type);
		ok = 0;
	}
	return ok;
}

/* xorshift64*: a seeded generator, so that a failure reproduces. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

/* Fuzzes the decoders with n random mutations of a valid vector (flipped
 * bytes, truncations, extensions, u32 fields set to edge values, swapped
 * spans), each in a buffer of its exact size so that an overread is caught
 * under `make test-asan`. Every mutation must be decoded or rejected; a
 * crash ends the runner. */
static void mutate(const struct vec *v, int n, uint64_t *seed)
{
	for (int i = 0; i < n; i++) {
		size_t len = v->n;
		uint8_t *b = malloc(len + 16 + 1);
		memcpy(b, v->frame, len);
		switch (rng_next(seed) % 5) {
		case 0:
			for (uint64_t k = 1 + rng_next(seed) % 4; k > 0 && len > 0; k--)
				b[rng_next(seed) % len] = (uint8_t)rng_next(seed);
			break;
		case 1:
			len = rng_next(seed) % (len + 1);
			break;
		case 2:
			for (uint64_t k = 1 + rng_next(seed) % 16; k > 0; k--)
				b[len++] = (uint8_t)rng_next(seed);
			break;
		case 3:
			if (len >= 4) {
				static const uint32_t edge[] = {0, 1, 0xffffffffu, 0x7fffffffu, 64, 65536};
				size_t at = rng_next(seed) % (len - 3);
				uint32_t x = edge[rng_next(seed) % 6];
				b[at] = (uint8_t)(x >> 24), b[at + 1] = (uint8_t)(x >> 16), b[at + 2] = (uint8_t)(x >> 8),
				b[at + 3] = (uint8_t)x;
			}
			break;
		default:
			if (len > 2) {
				size_t x = rng_next(seed) % len, y = rng_next(seed) % len;
				size_t lo = x < y ? x : y, hi = x < y ? y : x;
				uint8_t *t = malloc(len);
				memcpy(t, b, lo);
				memcpy(t + lo, b + hi, len - hi);
				memcpy(t + lo + (len - hi), b + lo, hi - lo);
				memcpy(b, t, len);
				free(t);
			}
		}
		uint8_t *exact = malloc(len ? len : 1);
		memcpy(exact, b, len);
		free(b);
		uint32_t blen = 0;
		uint8_t type = 0;
		if (len >= W_HEADER && w_parse_header(exact, &blen, &type) == 0 && (size_t)blen == len - W_HEADER &&
		    w_known_type(type) && w_check_body(type, exact + W_HEADER, blen) == 0) {
			struct out o = {.n = 0};
			(void)decode(type, exact + W_HEADER, blen, &o);
			for (size_t k = 0; k < o.n; k++) {
				free(o.f[k].k);
				free(o.f[k].v);
			}
		}
		free(exact);
	}
}

static void vec_free(struct vec *v)
{
	free(v->name);
	free(v->why);
	free(v->frame);
	for (size_t i = 0; i < v->nf; i++) {
		free(v->f[i].k);
		free(v->f[i].v);
	}
	free(v->f);
	memset(v, 0, sizeof *v);
}

/* Checks every vector of the file at path (want_min: at least that many). */
static void check_file(const char *path, int want_min)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		t_fail(__FILE__, __LINE__, "cannot open the test vectors %s", path);
		return;
	}
	char *line = NULL;
	size_t lcap = 0;
	ssize_t ll;
	int lineno = 0, nvec = 0, nvalid = 0, ninvalid = 0, bad = 0;
	uint64_t seed = 20261123;
	struct vec v;
	memset(&v, 0, sizeof v);
	for (;;) {
		ll = getline(&line, &lcap, f);
		if (ll >= 0) {
			lineno++;
			while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r'))
				line[--ll] = '\0';
		}
		int end_vec = ll < 0 || strncmp(line, "vector ", 7) == 0;
		if (end_vec && v.name) {
			nvec++;
			if (v.valid)
				nvalid++;
			else
				ninvalid++;
			if (!check(&v))
				bad++;
			else if (v.valid)
				mutate(&v, 1000, &seed);
			vec_free(&v);
		}
		if (ll < 0)
			break;
		if (ll == 0 || line[0] == '#')
			continue;
		if (strncmp(line, "vector ", 7) == 0) {
			v.name = strdup(line + 7);
			v.line = lineno;
			v.type = -1;
			continue;
		}
		if (v.name == NULL) {
			t_fail(__FILE__, lineno, "%s:%d: line outside a vector", path, lineno);
			continue;
		}
		char *sp = strchr(line, ' ');
		const char *key = line, *val = sp ? sp + 1 : "";
		if (sp)
			*sp = '\0';
		if (strcmp(key, "valid") == 0) {
			v.valid = 1;
		} else if (strcmp(key, "invalid") == 0) {
			v.valid = 0;
			v.why = strdup(val);
		} else if (strcmp(key, "hex") == 0) {
			size_t need = v.n + strlen(val) / 2 + 1;
			if (need > v.cap) {
				v.cap = need * 2;
				v.frame = realloc(v.frame, v.cap);
			}
			if (unhex(val, v.frame, &v.n))
				t_fail(__FILE__, lineno, "%s:%d: bad hex", path, lineno);
		} else if (strcmp(key, "type") == 0) {
			v.type = atoi(val);
		} else {
			v.f = realloc(v.f, (v.nf + 1) * sizeof *v.f);
			v.f[v.nf].k = strdup(key);
			v.f[v.nf].v = strdup(val);
			v.nf++;
		}
	}
	free(line);
	fclose(f);
	t_log("%s: %d vectors (%d valid, %d invalid), %d failed", path, nvec, nvalid, ninvalid, bad);
	if (nvec < want_min)
		t_fail(__FILE__, __LINE__, "%d vectors in %s, want at least %d", nvec, path, want_min);
}

void test_vectors(void)
{
	const char *path = getenv("OMST_VECTORS");
	if (path == NULL || *path == '\0')
		path = OMST_VECTORS_PATH;
	check_file(path, 1);
	/* Version 8: HELLO of 8 and PROGRESS (valid and invalid). */
	check_file(OMST_VECTORS_V8_PATH, 7);
}
