/*
 * async.c: asynchronous get. Each request runs in a thread of its own,
 * on a connection of its own from the handle's pool, so it never blocks
 * other calls on the handle. The thread's result and message are handed
 * to the thread that waits.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct omst_req {
	omst_t *h;
	char name[OMST_NAME_MAX + 1];
	size_t nlen;
	void *buf;
	size_t size;
	pthread_t thread;
	pthread_mutex_t mu;
	int done;   /* guarded by mu */
	int result; /* valid once done */
	omst_info_t info;
	char msg[1024];
};

static void *worker(void *arg)
{
	omst_req_t *r = arg;
	int e = handle_get(r->h, r->name, r->nlen, r->buf, r->size, &r->info);
	pthread_mutex_lock(&r->mu);
	r->result = e;
	if (e) {
		strncpy(r->msg, omst_errmsg(), sizeof r->msg - 1);
		r->msg[sizeof r->msg - 1] = '\0';
	}
	r->done = 1;
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

OMST_EXPORT int omst_get_start(omst_t *h, const char *name, void *buf, size_t size, omst_req_t **out)
{
	size_t nlen;
	if (out == NULL)
		return omst_fail(OMST_EINVAL, "get_start: out is NULL");
	*out = NULL;
	if (h == NULL)
		return omst_fail(OMST_EINVAL, "get_start: handle is NULL");
	int e = omst_check_name(name, &nlen);
	if (e)
		return e;
	if (buf == NULL && size > 0)
		return omst_fail(OMST_EINVAL, "get_start: buf is NULL");
	omst_req_t *r = calloc(1, sizeof *r);
	if (r == NULL)
		return omst_fail(OMST_ENOMEM, "out of memory");
	r->h = h;
	memcpy(r->name, name, nlen + 1);
	r->nlen = nlen;
	r->buf = buf;
	r->size = size;
	pthread_mutex_init(&r->mu, NULL);
	int te = pthread_create(&r->thread, NULL, worker, r);
	if (te != 0) {
		pthread_mutex_destroy(&r->mu);
		free(r);
		return omst_fail(OMST_ESYS, "get_start: pthread_create: %s", strerror(te));
	}
	*out = r;
	return 0;
}

OMST_EXPORT int omst_test(omst_req_t *r, int *done)
{
	if (r == NULL || done == NULL)
		return omst_fail(OMST_EINVAL, "omst_test: NULL argument");
	pthread_mutex_lock(&r->mu);
	*done = r->done;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

OMST_EXPORT int omst_wait(omst_req_t *r, omst_info_t *info)
{
	if (r == NULL)
		return omst_fail(OMST_EINVAL, "omst_wait: request is NULL");
	pthread_join(r->thread, NULL);
	int e = r->result;
	if (e)
		omst_fail(e, "%s", r->msg);
	else if (info)
		*info = r->info;
	pthread_mutex_destroy(&r->mu);
	free(r);
	return e;
}
