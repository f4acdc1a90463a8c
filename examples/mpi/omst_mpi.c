/*
 * omst_mpi: an MPI job that shares its initial data and collects its
 * results through omst instead of MPI_Bcast/MPI_Gather.
 *
 *   1. rank 0 stores the initial data (default 32 MiB, a deterministic
 *      pattern) under PREFIX/init with OmstPutData;
 *   2. MPI_Barrier; every rank fetches PREFIX/init with OmstGetData from
 *      its own host's daemon (chunks come down the tree: worker -> head ->
 *      root -> ..., cached on the way) and verifies every byte;
 *   3. every rank computes a result (default 1 MiB) derived from a checksum
 *      of the data and its rank, and stores it under PREFIX/result/<rank>;
 *   4. MPI_Barrier; rank 0 reads every result by name with OmstGetData and
 *      checks it against the value it expects.
 * The exit status is 0 only if every check on every rank passed.
 *
 * Which daemon a rank talks to: the library's default socket, i.e.
 * $OMST_SOCKET, else $OMST_HOME/omst.sock, else ~/.omst/omst.sock: on a real
 * cluster each rank's host runs its own daemon and nothing needs to be set.
 * To emulate hosts on one machine (scripts/localtree.sh), set
 * OMST_WORKER_SOCKETS="s0:s1:...": rank r then uses entry r (modulo the
 * count), set as OMST_SOCKET with setenv() right after MPI_Init and before
 * the first Omst call (the library reads it when it first connects).
 *
 * usage: omst_mpi [-s INIT_MIB] [-r RESULT_KIB] [PREFIX]
 *   PREFIX defaults to mpi/<jobid>, jobid = rank 0's time and pid, so
 *   repeated runs on one tree do not collide.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <omst.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* splitmix64: the deterministic pattern generator (one 64-bit word per
 * index, so any rank can regenerate any word independently). */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#define INIT_SEED 0x6f6d73745f6d7069ull /* "omst_mpi" */

/* Words are stored little-endian regardless of the host, so the blob is
 * the same bytes everywhere. */
static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void fill_init(unsigned char *buf, size_t size)
{
	for (size_t i = 0; i < size / 8; i++)
		put_le64(buf + 8 * i, mix64(INIT_SEED ^ i));
}

/* Verify the initial data word by word; returns the index of the first bad
 * word, or (size_t)-1 if all are right. */
static size_t check_init(const unsigned char *buf, size_t size)
{
	for (size_t i = 0; i < size / 8; i++)
		if (get_le64(buf + 8 * i) != mix64(INIT_SEED ^ i))
			return i;
	return (size_t)-1;
}

/* The "computation": a checksum of the whole initial data (order
 * dependent), then a vector derived from it and the rank. */
static uint64_t checksum(const unsigned char *buf, size_t size)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < size / 8; i++)
		h = mix64(h ^ get_le64(buf + 8 * i));
	return h;
}

static uint64_t result_word(uint64_t sum, int rank, size_t j)
{
	return mix64(sum ^ ((uint64_t)(unsigned)rank << 40) ^ j);
}

static void fill_result(unsigned char *buf, size_t size, uint64_t sum, int rank)
{
	for (size_t j = 0; j < size / 8; j++)
		put_le64(buf + 8 * j, result_word(sum, rank, j));
}

static size_t check_result(const unsigned char *buf, size_t size, uint64_t sum, int rank)
{
	for (size_t j = 0; j < size / 8; j++)
		if (get_le64(buf + 8 * j) != result_word(sum, rank, j))
			return j;
	return (size_t)-1;
}

static int rank_g = -1;

static void fail_call(const char *what, const char *name, int rc)
{
	const char *msg = omst_errmsg();
	fprintf(stderr, "omst_mpi: rank %d: %s %s: %s%s%s\n", rank_g, what, name, omst_strerror(rc),
	        msg && *msg ? ": " : "", msg ? msg : "");
}

/* Entry i (modulo the count) of a ':'-separated list; NULL if the list is
 * empty. The result is malloc'ed. */
static char *list_entry(const char *list, int i)
{
	int n = 1;
	for (const char *p = list; *p; p++)
		n += *p == ':';
	if (!*list)
		return NULL;
	i %= n;
	const char *s = list;
	while (i-- > 0)
		s = strchr(s, ':') + 1;
	size_t len = strcspn(s, ":");
	if (len == 0)
		return NULL;
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	memcpy(out, s, len);
	out[len] = 0;
	return out;
}

static void usage(void)
{
	fprintf(stderr, "usage: omst_mpi [-s INIT_MIB] [-r RESULT_KIB] [PREFIX]\n");
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	rank_g = rank;

	long init_mib = 32, result_kib = 1024;
	int opt;
	while ((opt = getopt(argc, argv, "s:r:h")) != -1) {
		switch (opt) {
		case 's': init_mib = strtol(optarg, NULL, 10); break;
		case 'r': result_kib = strtol(optarg, NULL, 10); break;
		default:
			if (rank == 0)
				usage();
			MPI_Finalize();
			return 2;
		}
	}
	if (init_mib < 1 || init_mib > 4096 || result_kib < 1 || result_kib > 1024 * 1024 || argc - optind > 1) {
		if (rank == 0)
			usage();
		MPI_Finalize();
		return 2;
	}
	size_t init_size = (size_t)init_mib << 20, result_size = (size_t)result_kib << 10;

	/* Job name prefix: from argv, else mpi/<rank 0's time-pid>, the same on
	 * every rank. */
	char prefix[512];
	if (optind < argc) {
		snprintf(prefix, sizeof prefix, "%s", argv[optind]);
	} else {
		unsigned long long job[2] = {(unsigned long long)time(NULL), (unsigned long long)getpid()};
		MPI_Bcast(job, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
		snprintf(prefix, sizeof prefix, "mpi/%llu-%llu", job[0], job[1]);
	}
	char init_name[600], result_name[600];
	snprintf(init_name, sizeof init_name, "%s/init", prefix);

	/* This rank's daemon (see the comment at the top). */
	const char *list = getenv("OMST_WORKER_SOCKETS");
	if (list && *list) {
		char *sock = list_entry(list, rank);
		if (!sock || setenv("OMST_SOCKET", sock, 1) != 0) {
			fprintf(stderr, "omst_mpi: rank %d: bad OMST_WORKER_SOCKETS\n", rank);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		free(sock);
	}
	const char *sock = getenv("OMST_SOCKET");
	char where[256];
	snprintf(where, sizeof where, "%s", sock && *sock ? sock : "(default socket)");

	int ok = 1;
	unsigned char *data = malloc(init_size), *res = malloc(result_size);
	if (!data || !res) {
		fprintf(stderr, "omst_mpi: rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}

	/* 1. rank 0 publishes the initial data. */
	double t_put = 0;
	if (rank == 0) {
		fill_init(data, init_size);
		double t0 = MPI_Wtime();
		int rc = OmstPutData(init_name, data, init_size);
		t_put = MPI_Wtime() - t0;
		if (rc != OMST_OK) {
			fail_call("OmstPutData", init_name, rc);
			ok = 0;
		}
		memset(data, 0, init_size); /* rank 0 fetches it back like everyone else */
	}
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (!ok) {
		MPI_Finalize();
		return 1;
	}

	/* 2. Everyone fetches it from its own daemon, at the same time. */
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	int rc = OmstGetData(init_name, data, init_size);
	double t_get = MPI_Wtime() - t0;
	uint64_t sum = 0;
	if (rc != OMST_OK) {
		fail_call("OmstGetData", init_name, rc);
		ok = 0;
	} else {
		size_t bad = check_init(data, init_size);
		if (bad != (size_t)-1) {
			fprintf(stderr, "omst_mpi: rank %d: %s wrong at byte %zu\n", rank, init_name, bad * 8);
			ok = 0;
		}
	}

	/* 3. Compute and publish this rank's result. */
	double t_res = 0;
	if (ok) {
		sum = checksum(data, init_size);
		fill_result(res, result_size, sum, rank);
		snprintf(result_name, sizeof result_name, "%s/result/%d", prefix, rank);
		t0 = MPI_Wtime();
		rc = OmstPutData(result_name, res, result_size);
		t_res = MPI_Wtime() - t0;
		if (rc != OMST_OK) {
			fail_call("OmstPutData", result_name, rc);
			ok = 0;
		}
	}

	/* Everyone reports to rank 0 (the times for the summary, and whether
	 * it got the data right). */
	double mine[3] = {t_get, t_res, ok};
	double *all = rank == 0 ? malloc(sizeof(double) * 3 * (size_t)nranks) : NULL;
	MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	char *socks = NULL;
	if (rank == 0)
		socks = malloc((size_t)nranks * sizeof where);
	MPI_Gather(where, sizeof where, MPI_CHAR, socks, sizeof where, MPI_CHAR, 0, MPI_COMM_WORLD);

	/* 4. After every rank has published, rank 0 reads the results by name.
	 * They come from the ranks' daemons through the tree, not through any
	 * MPI message: rank 0 only knows the names. */
	MPI_Barrier(MPI_COMM_WORLD);
	int final_ok = ok;
	if (rank == 0) {
		int good = 0;
		double t_collect = MPI_Wtime();
		for (int r = 0; r < nranks; r++) {
			snprintf(result_name, sizeof result_name, "%s/result/%d", prefix, r);
			memset(res, 0, result_size);
			rc = OmstGetData(result_name, res, result_size);
			if (rc != OMST_OK) {
				fail_call("OmstGetData", result_name, rc);
				continue;
			}
			/* sum is rank 0's own checksum: a rank that computed on other
			 * data than rank 0's would produce a result that fails here. */
			size_t bad = check_result(res, result_size, sum, r);
			if (bad != (size_t)-1) {
				fprintf(stderr, "omst_mpi: %s wrong at byte %zu\n", result_name, bad * 8);
				continue;
			}
			good++;
		}
		t_collect = MPI_Wtime() - t_collect;

		printf("omst_mpi: %d ranks, initial data %s (%ld MiB), results %s/result/<rank> (%ld KiB each)\n", nranks,
		       init_name, init_mib, prefix, result_kib);
		printf("  rank 0 OmstPutData %-s: %.3f s\n", init_name, t_put);
		for (int r = 0; r < nranks; r++) {
			double g = all[3 * r], p = all[3 * r + 1];
			int rok = all[3 * r + 2] != 0;
			if (rok) {
				printf("  rank %d via %s: OmstGetData %.3f s (%.0f MiB/s), data verified, OmstPutData result "
				       "%.3f s\n",
				       r, socks + (size_t)r * sizeof where, g, g > 0 ? (double)init_mib / g : 0.0, p);
			} else {
				printf("  rank %d via %s: FAILED (see its message above)\n", r, socks + (size_t)r * sizeof where);
				final_ok = 0;
			}
		}
		printf("  rank 0 read %d/%d results by name and checked them: %.3f s\n", good, nranks, t_collect);
		if (good != nranks)
			final_ok = 0;
		printf("omst_mpi: %s\n", final_ok ? "PASS" : "FAIL");
		fflush(stdout);
	}
	MPI_Bcast(&final_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	free(all);
	free(socks);
	free(data);
	free(res);
	MPI_Finalize();
	return final_ok ? 0 : 1;
}
