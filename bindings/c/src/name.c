/*
 * name.c: argument checks that need no daemon: names (docs section 6.2,
 * the same rules as the daemon's blob.ValidateName), paths, chunk sizes.
 * Failures set the thread's message.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int omst_utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		uint32_t cp, min;
		if (c >= 0xC2 && c <= 0xDF) {
			len = 2, cp = c & 0x1F, min = 0x80;
		} else if (c >= 0xE0 && c <= 0xEF) {
			len = 3, cp = c & 0x0F, min = 0x800;
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 4, cp = c & 0x07, min = 0x10000;
		} else {
			return 0;
		}
		if (n - i < len)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += len;
	}
	return 1;
}

/* Decodes the (valid) UTF-8 sequence at s[*i], advancing *i. */
static uint32_t utf8_next(const unsigned char *s, size_t *i)
{
	unsigned c = s[*i];
	if (c < 0x80) {
		(*i)++;
		return c;
	}
	size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
	uint32_t cp = c & (0x7F >> len);
	for (size_t k = 1; k < len; k++)
		cp = cp << 6 | (s[*i + k] & 0x3F);
	*i += len;
	return cp;
}

int omst_check_name(const char *name, size_t *len)
{
	if (name == NULL)
		return omst_fail(OMST_EINVAL, "name is NULL");
	size_t n = strnlen(name, OMST_NAME_MAX + 1);
	if (n == 0)
		return omst_fail(OMST_EINVALIDNAME, "invalid name: empty name");
	if (n > OMST_NAME_MAX)
		return omst_fail(OMST_EINVALIDNAME, "invalid name \"%.64s...\": more than %d bytes", name,
		                 OMST_NAME_MAX);
	const unsigned char *s = (const unsigned char *)name;
	if (!omst_utf8_valid(s, n))
		return omst_fail(OMST_EINVALIDNAME, "invalid name: not valid UTF-8");
	if (s[0] == '/')
		return omst_fail(OMST_EINVALIDNAME, "invalid name \"%.64s\": starts with '/'", name);
	for (size_t i = 0; i < n;) {
		uint32_t r = utf8_next(s, &i);
		if (r < 0x20 || (r >= 0x7F && r <= 0x9F))
			return omst_fail(OMST_EINVALIDNAME, "invalid name: contains control character U+%04X",
			                 (unsigned)r);
	}
	/* Segments between '/': neither empty, "." nor "..". */
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '/')
			continue;
		size_t sl = i - start;
		if (sl == 0)
			return omst_fail(OMST_EINVALIDNAME,
			                 "invalid name \"%.64s\": has an empty segment ('//' or a trailing '/')", name);
		if ((sl == 1 && s[start] == '.') || (sl == 2 && s[start] == '.' && s[start + 1] == '.'))
			return omst_fail(OMST_EINVALIDNAME, "invalid name \"%.64s\": has a \"%.*s\" segment", name,
			                 (int)sl, name + start);
		start = i + 1;
	}
	*len = n;
	return 0;
}

int omst_abs_path(const char *path, char **out, size_t *len)
{
	if (path == NULL)
		return omst_fail(OMST_EINVAL, "path is NULL");
	size_t n = strnlen(path, W_MAX_PATH + 1);
	if (n == 0)
		return omst_fail(OMST_EINVAL, "path is empty");
	if (n > W_MAX_PATH)
		return omst_fail(OMST_EINVAL, "path longer than %u bytes", W_MAX_PATH);
	char *p;
	if (path[0] == '/') {
		p = malloc(n + 1);
		if (p == NULL)
			return omst_fail(OMST_ENOMEM, "out of memory");
		memcpy(p, path, n + 1);
	} else {
		char *cwd = getcwd(NULL, 0);
		if (cwd == NULL)
			return omst_fail(OMST_ESYS, "getcwd: %s", strerror(errno));
		size_t cl = strlen(cwd);
		int slash = cl > 0 && cwd[cl - 1] == '/';
		p = malloc(cl + !slash + n + 1);
		if (p == NULL) {
			free(cwd);
			return omst_fail(OMST_ENOMEM, "out of memory");
		}
		memcpy(p, cwd, cl);
		if (!slash)
			p[cl++] = '/';
		memcpy(p + cl, path, n + 1);
		free(cwd);
		n += cl;
	}
	if (n > W_MAX_PATH) {
		free(p);
		return omst_fail(OMST_EINVAL, "absolute path longer than %u bytes", W_MAX_PATH);
	}
	*out = p;
	*len = n;
	return 0;
}

int omst_check_chunk_size(uint32_t cs)
{
	if (cs != 0 && (cs < 4096 || cs > (64u << 20)))
		return omst_fail(OMST_EINVAL, "chunk size %u: want 0 (default) or 4096 .. 67108864", (unsigned)cs);
	return 0;
}
