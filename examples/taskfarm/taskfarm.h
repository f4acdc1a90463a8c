/*
 * taskfarm.h: what the master and the workers of the task farm agree on:
 * blob names, the initial data's pattern and the computation, so the master
 * can check every result it reads back.
 *
 *   PREFIX/init           the initial data, put once by the master
 *   PREFIX/result/<task>  task <task>'s result, put by the worker that ran it
 */
#ifndef TASKFARM_H
#define TASKFARM_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define TF_INIT_SEED 0x6f6d73745f746672ull /* "omst_tfr" */

/* splitmix64 finalizer: the pattern and the "computation". */
static inline uint64_t tf_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Little-endian words, so the blobs are the same bytes on every host. */
static inline void tf_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t tf_get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t tf_init_word(size_t i) { return tf_mix(TF_INIT_SEED ^ i); }

static inline void tf_fill_init(unsigned char *buf, size_t size)
{
	for (size_t i = 0; i < size / 8; i++)
		tf_put64(buf + 8 * i, tf_init_word(i));
}

/* Index of the first wrong word of the initial data, or (size_t)-1. */
static inline size_t tf_check_init(const unsigned char *buf, size_t size)
{
	for (size_t i = 0; i < size / 8; i++)
		if (tf_get64(buf + 8 * i) != tf_init_word(i))
			return i;
	return (size_t)-1;
}

/* The task's parameter-dependent setup, independent of the initial data
 * (the worker computes it while the initial data is still arriving):
 * key[j] for j < n. */
static inline uint64_t tf_key(int task, size_t j) { return tf_mix(((uint64_t)(unsigned)task << 48) ^ (j * 0x2545f4914f6cdd1dull)); }

/* The task's pass over the initial data: a checksum seeded by the task. */
static inline uint64_t tf_checksum(const unsigned char *buf, size_t size, int task)
{
	uint64_t h = tf_mix(0xcbf29ce484222325ull ^ (uint64_t)(unsigned)task);
	for (size_t i = 0; i < size / 8; i++)
		h = tf_mix(h ^ tf_get64(buf + 8 * i));
	return h;
}

/* Result word j of a task: from its checksum and its key table. */
static inline uint64_t tf_result_word(uint64_t sum, uint64_t key) { return tf_mix(sum ^ key); }

static inline double tf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif /* TASKFARM_H */
