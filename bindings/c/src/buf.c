/*
 * buf.c: library buffers (omst_buf_t).
 *
 * Copy buffers are an anonymous read-write mapping the GET fills.
 * Zero-copy buffers (GET_FD, docs section 6.9) start as a PROT_NONE
 * reservation of size rounded up to pages; each extent whose blob and file
 * offsets are page-aligned (and which ends on a page boundary, or at the
 * end of the blob) is mapped over it with MAP_FIXED | MAP_PRIVATE |
 * MAP_POPULATE. At the first extent that cannot be mapped, the rest of the
 * reservation (from that extent's offset, a page boundary) becomes
 * anonymous read-write memory, and that extent and every later one are
 * copied in with pread. buf_finish makes copied parts read-only unless
 * OMST_BUF_WRITABLE. The buffer owns its mapping only: it stays valid
 * after the connection and the handle are gone.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

size_t buf_page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? (size_t)p : 4096;
}

static int new_buf(const omst_info_t *info, unsigned flags, int prot, omst_buf_t **out)
{
	if (info->size > (uint64_t)SIZE_MAX - 2 * buf_page_size())
		return omst_fail(OMST_ENOMEM, "blob of %llu bytes does not fit in the address space",
		                 (unsigned long long)info->size);
	omst_buf_t *b = calloc(1, sizeof *b);
	if (b == NULL)
		return omst_fail(OMST_ENOMEM, "out of memory");
	b->info = *info;
	b->size = (size_t)info->size;
	b->flags = flags;
	if (b->size > 0) {
		size_t pg = buf_page_size();
		b->maplen = (b->size + pg - 1) / pg * pg;
		/* A copy buffer is faulted in at once (cheaper than a fault per page). */
		int mflags = MAP_PRIVATE | MAP_ANONYMOUS | (prot == PROT_NONE ? MAP_NORESERVE : MAP_POPULATE);
		void *p = mmap(NULL, b->maplen, prot, mflags, -1, 0);
		if (p == MAP_FAILED) {
			int e = omst_fail(OMST_ENOMEM, "mmap of %zu bytes: %s", b->maplen, strerror(errno));
			free(b);
			return e;
		}
		b->base = p;
	}
	*out = b;
	return 0;
}

int buf_new_anon(const omst_info_t *info, unsigned flags, omst_buf_t **out)
{
	int e = new_buf(info, flags, PROT_READ | PROT_WRITE, out);
	if (e == 0)
		(*out)->copy_from = 0;
	return e;
}

int buf_new_reserved(const omst_info_t *info, unsigned flags, omst_buf_t **out)
{
	int e = new_buf(info, flags, PROT_NONE, out);
	if (e == 0) {
		(*out)->fd_mode = 1;
		(*out)->copy_from = (*out)->maplen; /* nothing copied yet */
	}
	return e;
}

/* Switches the rest of the reservation, from the page-aligned offset from,
 * to anonymous read-write memory. */
static int to_copy_mode(omst_buf_t *b, size_t from)
{
	if (from < b->maplen) {
		void *p = mmap(b->base + from, b->maplen - from, PROT_READ | PROT_WRITE,
		               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return omst_fail(OMST_ENOMEM, "mmap: %s", strerror(errno));
	}
	b->copy_from = from;
	return 0;
}

static int pread_all(int fd, uint8_t *dst, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t r = pread(fd, dst, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return omst_fail(OMST_ESYS, "pread of a descriptor from the daemon: %s", strerror(errno));
		if (r == 0)
			return omst_fail(OMST_EPROTO, "descriptor from the daemon is shorter than its extent");
		dst += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int buf_add_extent(omst_buf_t *b, const struct w_extent *e, int fd)
{
	if (e->blob_offset != b->filled || e->length == 0 || e->length > b->size - b->filled)
		return omst_fail(OMST_EPROTO, "extent [%llu, +%llu) out of order for a %zu byte blob at %zu",
		                 (unsigned long long)e->blob_offset, (unsigned long long)e->length, b->size,
		                 b->filled);
	if (e->file_offset > (uint64_t)INT64_MAX - e->length)
		return omst_fail(OMST_EPROTO, "extent file offset out of range");
	/* A file shorter than its extent would make the mapping SIGBUS. */
	struct stat st;
	if (fstat(fd, &st) != 0)
		return omst_fail(OMST_ESYS, "fstat of a descriptor from the daemon: %s", strerror(errno));
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < e->file_offset + e->length)
		return omst_fail(OMST_EPROTO, "descriptor from the daemon is not a regular file holding its extent");

	size_t pg = buf_page_size(), off = (size_t)e->blob_offset, len = (size_t)e->length;
	int aligned = off % pg == 0 && e->file_offset % pg == 0 && ((off + len) % pg == 0 || off + len == b->size);
	if (off >= b->copy_from || !aligned) {
		if (off < b->copy_from) {
			/* off is page-aligned: every earlier extent ended on a page. */
			int r = to_copy_mode(b, off / pg * pg);
			if (r)
				return r;
		}
		int r = pread_all(fd, b->base + off, len, e->file_offset);
		if (r)
			return r;
	} else {
		int prot = PROT_READ | (b->flags & OMST_BUF_WRITABLE ? PROT_WRITE : 0);
		void *p = mmap(b->base + off, len, prot, MAP_FIXED | MAP_PRIVATE | MAP_POPULATE, fd,
		               (off_t)e->file_offset);
		if (p == MAP_FAILED) {
			/* Typically ENOMEM from too many mappings (vm.max_map_count,
			 * one per chunk): copy this extent and the rest instead. A
			 * failed MAP_FIXED may have unmapped the range: remap it. */
			int r = to_copy_mode(b, off);
			if (r)
				return r;
			if ((r = pread_all(fd, b->base + off, len, e->file_offset)) != 0)
				return r;
		}
	}
	b->filled += len;
	return 0;
}

int buf_finish(omst_buf_t *b)
{
	if (b->fd_mode && b->filled != b->size)
		return omst_fail(OMST_EPROTO, "extents cover %zu of %zu bytes", b->filled, b->size);
	b->zero_copy = b->fd_mode && b->copy_from >= b->maplen;
	if (!(b->flags & OMST_BUF_WRITABLE) && b->copy_from < b->maplen) {
		if (mprotect(b->base + b->copy_from, b->maplen - b->copy_from, PROT_READ) != 0)
			return omst_fail(OMST_ESYS, "mprotect: %s", strerror(errno));
	}
	return 0;
}

OMST_EXPORT const void *omst_buf_data(const omst_buf_t *b)
{
	if (b == NULL)
		return NULL;
	return b->base ? (const void *)b->base : (const void *)b->empty;
}

OMST_EXPORT void *omst_buf_data_mut(omst_buf_t *b)
{
	if (b == NULL || !(b->flags & OMST_BUF_WRITABLE))
		return NULL;
	return b->base ? (void *)b->base : (void *)b->empty;
}

OMST_EXPORT size_t omst_buf_size(const omst_buf_t *b)
{
	return b ? b->size : 0;
}

OMST_EXPORT int omst_buf_zero_copy(const omst_buf_t *b)
{
	return b ? b->zero_copy : 0;
}

OMST_EXPORT const omst_info_t *omst_buf_info(const omst_buf_t *b)
{
	return b ? &b->info : NULL;
}

OMST_EXPORT void omst_buf_release(omst_buf_t *b)
{
	if (b == NULL)
		return;
	if (b->base)
		munmap(b->base, b->maplen);
	free(b);
}
