/*
 * omst_bench: throughput and latency of libomst against a running daemon.
 *
 *   omst_bench [-size BYTES] [-runs R] [-calls N] [-dir DIR] [-csv FILE] [SOCKET]
 *
 * SOCKET defaults to the library's default socket ($OMST_SOCKET, else
 * $OMST_HOME/omst.sock, else ~/.omst/omst.sock). It first puts a blob of
 * BYTES (default 1 GiB; suffixes K, M, G) of pseudo-random bytes, then
 * reports the median (and min, max) over R runs (default 5) of:
 *
 *   get-copy     omst_get into a caller buffer (already faulted in)
 *   zc-map       omst_get_buf zero-copy: from the call until it returns
 *                with every extent mapped and populated (MAP_POPULATE)
 *   zc-map+touch the same plus reading one byte per page (a fair
 *                comparison with the copies, which end with the bytes in
 *                memory the caller can read)
 *   buf-copy     omst_get_buf with OMST_BUF_COPY (plain GET into an
 *                anonymous mapping the library allocates)
 *   file-read    read() of the same bytes from a plain file in the page
 *                cache (written to DIR, default /tmp, and read once first)
 *                into a caller buffer (already faulted in)
 *
 * each in MB/s (10^6 bytes per second), and (measured first, before the
 * big blob is put) the round trip of a small
 * (64-byte) omst_get, median and 99th percentile over N calls (default
 * 2000), in microseconds. -csv FILE also writes the numbers as CSV.
 */
#include "omst.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static size_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1024 * 1024; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
	}
	return (size_t)v;
}

static void die(const char *what, int e)
{
	fprintf(stderr, "omst_bench: %s: %s (%s)\n", what, omst_strerror(e), omst_errmsg());
	exit(1);
}

static void fill(uint8_t *p, size_t n)
{
	uint64_t x = 88172645463325252ull;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)i;
}

struct row {
	const char *name;
	double med, min, max; /* MB/s */
	int zero_copy;        /* -1: not applicable */
};

static void summarize(struct row *r, const char *name, double *secs, int runs, size_t size, int zc)
{
	double mbs[64];
	for (int i = 0; i < runs; i++)
		mbs[i] = size / 1e6 / secs[i];
	r->name = name;
	r->med = median(mbs, runs);
	r->min = mbs[0];
	r->max = mbs[runs - 1];
	r->zero_copy = zc;
}

int main(int argc, char **argv)
{
	size_t size = (size_t)1 << 30;
	int runs = 5, calls = 2000;
	const char *sock = NULL, *csv = NULL, *dir = "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-size") && i + 1 < argc)
			size = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "-runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-calls") && i + 1 < argc)
			calls = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-csv") && i + 1 < argc)
			csv = argv[++i];
		else if (!strcmp(argv[i], "-dir") && i + 1 < argc)
			dir = argv[++i];
		else if (argv[i][0] != '-')
			sock = argv[i];
		else {
			fprintf(stderr, "usage: omst_bench [-size BYTES] [-runs R] [-calls N] [-dir DIR] [-csv FILE] [SOCKET]\n");
			return 2;
		}
	}
	if (runs < 1 || runs > 64 || calls < 1 || size == 0) {
		fprintf(stderr, "omst_bench: bad -runs (1..64), -calls or -size\n");
		return 2;
	}

	omst_t *h;
	int e = omst_connect(sock, &h);
	if (e)
		die("connect", e);
	/* small get round trip (first, while the daemon is otherwise idle) */
	uint8_t small[64];
	memset(small, 7, sizeof small);
	if ((e = omst_put(h, "bench/small", small, sizeof small, NULL)) != 0)
		die("put small", e);
	double *lat = malloc(sizeof *lat * (size_t)calls);
	for (int i = 0; i < 100; i++) /* warm up */
		omst_get(h, "bench/small", small, sizeof small, NULL);
	for (int i = 0; i < calls; i++) {
		double t0 = now();
		if ((e = omst_get(h, "bench/small", small, sizeof small, NULL)) != 0)
			die("small get", e);
		lat[i] = (now() - t0) * 1e6;
	}
	double lat_med = median(lat, calls), lat_p99 = lat[(size_t)calls * 99 / 100];
	double lat_min = lat[0];

	uint8_t *data = malloc(size), *buf = malloc(size);
	if (!data || !buf) {
		fprintf(stderr, "omst_bench: out of memory\n");
		return 1;
	}
	fill(data, size);
	memset(buf, 0, size); /* fault the destination in once */
	char name[64];
	snprintf(name, sizeof name, "bench/blob-%zu", size);
	double t0 = now();
	if ((e = omst_put(h, name, data, size, NULL)) != 0)
		die("put", e);
	double put_s = now() - t0;

	double secs[64], secs2[64];
	struct row rows[5];
	int nrows = 0;
	long pg = sysconf(_SC_PAGESIZE);

	/* (a) get into a caller buffer */
	for (int i = 0; i < runs; i++) {
		t0 = now();
		if ((e = omst_get(h, name, buf, size, NULL)) != 0)
			die("get", e);
		secs[i] = now() - t0;
	}
	if (memcmp(buf, data, size) != 0) {
		fprintf(stderr, "omst_bench: get returned wrong bytes\n");
		return 1;
	}
	summarize(&rows[nrows++], "get-copy", secs, runs, size, -1);

	/* (b) zero-copy: mapped, then touched */
	int zc = 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < runs; i++) {
		omst_buf_t *b;
		t0 = now();
		if ((e = omst_get_buf(h, name, 0, &b)) != 0)
			die("get_buf", e);
		double t1 = now();
		const volatile uint8_t *p = omst_buf_data(b);
		for (size_t off = 0; off < size; off += (size_t)pg)
			sink ^= p[off];
		double t2 = now();
		secs[i] = t1 - t0;
		secs2[i] = t2 - t0;
		zc = omst_buf_zero_copy(b);
		if (i == 0 && memcmp(omst_buf_data(b), data, size) != 0) {
			fprintf(stderr, "omst_bench: get_buf returned wrong bytes\n");
			return 1;
		}
		omst_buf_release(b);
	}
	summarize(&rows[nrows++], "zc-map", secs, runs, size, zc);
	summarize(&rows[nrows++], "zc-map+touch", secs2, runs, size, zc);

	/* library copy buffer */
	for (int i = 0; i < runs; i++) {
		omst_buf_t *b;
		t0 = now();
		if ((e = omst_get_buf(h, name, OMST_BUF_COPY, &b)) != 0)
			die("get_buf copy", e);
		secs[i] = now() - t0;
		omst_buf_release(b);
	}
	summarize(&rows[nrows++], "buf-copy", secs, runs, size, 0);

	/* (c) read() of a page-cached file */
	char path[4096];
	snprintf(path, sizeof path, "%s/omst_bench-%d.dat", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		fprintf(stderr, "omst_bench: %s: %s\n", path, strerror(errno));
		return 1;
	}
	unlink(path);
	for (size_t off = 0; off < size;) {
		ssize_t w = write(fd, data + off, size - off > (64u << 20) ? (64u << 20) : size - off);
		if (w <= 0) {
			fprintf(stderr, "omst_bench: write %s: %s\n", path, strerror(errno));
			return 1;
		}
		off += (size_t)w;
	}
	for (int i = -1; i < runs; i++) { /* run -1 warms the cache */
		t0 = now();
		for (size_t off = 0; off < size;) {
			ssize_t r = pread(fd, buf + off, size - off > (16u << 20) ? (16u << 20) : size - off, (off_t)off);
			if (r <= 0) {
				fprintf(stderr, "omst_bench: read: %s\n", strerror(errno));
				return 1;
			}
			off += (size_t)r;
		}
		if (i >= 0)
			secs[i] = now() - t0;
	}
	close(fd);
	summarize(&rows[nrows++], "file-read", secs, runs, size, -1);

	double fileread = rows[4].med, zct = rows[2].med;
	printf("omst_bench: blob of %zu bytes (put in %.2f s), median of %d runs, MB/s = 10^6 bytes/s\n", size, put_s,
	       runs);
	printf("%-14s %10s %10s %10s  %s\n", "test", "median", "min", "max", "note");
	for (int i = 0; i < nrows; i++)
		printf("%-14s %10.0f %10.0f %10.0f  %s\n", rows[i].name, rows[i].med, rows[i].min, rows[i].max,
		       rows[i].zero_copy == 1 ? "zero-copy" : rows[i].zero_copy == 0 ? "copied" : "");
	printf("%-14s %10.1f %10.1f %10.1f  us per 64-byte omst_get, %d calls (max column: p99)\n", "small-get",
	       lat_med, lat_min, lat_p99, calls);
	printf("zero-copy (map+touch) / file read = %.2f\n", zct / fileread);
	(void)sink;

	if (csv) {
		FILE *f = fopen(csv, "w");
		if (!f) {
			fprintf(stderr, "omst_bench: %s: %s\n", csv, strerror(errno));
			return 1;
		}
		fprintf(f, "test,unit,median,min,max,size,runs\n");
		for (int i = 0; i < nrows; i++)
			fprintf(f, "%s,MB/s,%.1f,%.1f,%.1f,%zu,%d\n", rows[i].name, rows[i].med, rows[i].min, rows[i].max, size,
			        runs);
		fprintf(f, "small-get,us,%.2f,%.2f,%.2f,64,%d\n", lat_med, lat_min, lat_p99, calls);
		fclose(f);
	}
	free(lat);
	free(data);
	free(buf);
	omst_close(h);
	return 0;
}
