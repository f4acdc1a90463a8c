/*
 * internal.h: declarations shared by the library's source files (not
 * installed). Layers, bottom up:
 *   error.c  thread-local error message
 *   wire.c   frame encoding/decoding: pure functions over byte arrays
 *   name.c   argument checks (names, paths)
 *   localfile.c  the caller's files (put_file, get_file), opened with its
 *            own rights: path resolution, temporary file, rename
 *   conn.c   one socket connection: connect + HELLO, framed IO with
 *            timeouts, descriptor (SCM_RIGHTS) FIFO, a frame sent with a
 *            descriptor
 *   buf.c    omst_buf_t: library buffers (anonymous or mapped from files)
 *   ops.c    one request on one connection (PUT, GET, GET_FD, ...)
 *   api.c    handles (connection pool, fork safety), the public API
 *   async.c  asynchronous get
 */
#ifndef OMST_INTERNAL_H
#define OMST_INTERNAL_H

#include "omst.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#define OMST_EXPORT __attribute__((visibility("default")))

/* Internal functions are global in libomst.a (hidden in the .so): give them
 * a prefix of the library's own so that they cannot clash with a program's
 * symbols when it links the static library. */
#define omst_fail omst__fail
#define omst_fail_msg omst__fail_msg
#define omst_code_from_wire omst__code_from_wire
#define omst_check_name omst__check_name
#define omst_utf8_valid omst__utf8_valid
#define omst_abs_path omst__abs_path
#define omst_slurm_socket omst__slurm_socket
#define omst_check_chunk_size omst__check_chunk_size
#define buf_add_extent omst__buf_add_extent
#define buf_finish omst__buf_finish
#define buf_new_anon omst__buf_new_anon
#define buf_new_reserved omst__buf_new_reserved
#define buf_page_size omst__buf_page_size
#define conn_break omst__conn_break
#define conn_close omst__conn_close
#define conn_drop_fds omst__conn_drop_fds
#define conn_idle_ok omst__conn_idle_ok
#define conn_open omst__conn_open
#define conn_read omst__conn_read
#define conn_read_body omst__conn_read_body
#define conn_read_header omst__conn_read_header
#define conn_send omst__conn_send
#define conn_send_fd omst__conn_send_fd
#define conn_sendv omst__conn_sendv
#define conn_watch omst__conn_watch
#define conn_skip omst__conn_skip
#define conn_take_fds omst__conn_take_fds
#define lf_abort omst__lf_abort
#define lf_commit omst__lf_commit
#define lf_create omst__lf_create
#define lf_kept_mode omst__lf_kept_mode
#define lf_may_follow omst__lf_may_follow
#define lf_open_read omst__lf_open_read
#define lf_resolve omst__lf_resolve
#define handle_acquire omst__handle_acquire
#define handle_get omst__handle_get
#define handle_release omst__handle_release
#define op_get omst__op_get
#define op_get_anon omst__op_get_anon
#define op_get_fd omst__op_get_fd
#define op_get_stream omst__op_get_stream
#define op_get_to_fd omst__op_get_to_fd
#define progress_check omst__progress_check
#define op_put omst__op_put
#define op_put_fd omst__op_put_fd
#define op_put_stream omst__op_put_stream
#define op_remove omst__op_remove
#define op_stat omst__op_stat
#define w_check_body omst__w_check_body
#define w_dec_empty omst__w_dec_empty
#define w_dec_error omst__w_dec_error
#define w_dec_fds omst__w_dec_fds
#define w_dec_get_file omst__w_dec_get_file
#define w_dec_hello omst__w_dec_hello
#define w_dec_info omst__w_dec_info
#define w_dec_listing omst__w_dec_listing
#define w_dec_name_req omst__w_dec_name_req
#define w_dec_progress omst__w_dec_progress
#define w_dec_put omst__w_dec_put
#define w_dec_put_file omst__w_dec_put_file
#define w_enc_data omst__w_enc_data
#define w_enc_empty omst__w_enc_empty
#define w_enc_get_file omst__w_enc_get_file
#define w_enc_hello omst__w_enc_hello
#define w_enc_name_req omst__w_enc_name_req
#define w_enc_put omst__w_enc_put
#define w_enc_put_fd omst__w_enc_put_fd
#define w_enc_put_file omst__w_enc_put_file
#define w_info_export omst__w_info_export
#define w_known_type omst__w_known_type
#define w_parse_header omst__w_parse_header
#define w_put_header omst__w_put_header

#if defined(__GNUC__)
#define OMST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define OMST_PRINTF(a, b)
#endif

/* ---- error.c ------------------------------------------------------------ */

/* Sets the calling thread's message (printf-style) and returns code. */
int omst_fail(int code, const char *fmt, ...) OMST_PRINTF(2, 3);
/* Sets the message verbatim (n bytes, not NUL-terminated) and returns code. */
int omst_fail_msg(int code, const char *msg, size_t n);
/* Maps a daemon ERROR code (1..) to the library's negative code. */
int omst_code_from_wire(uint32_t code);

/* ---- wire.c (docs/rpcbridge.md sections 2 to 6) ------------------------- */

#define W_HEADER 8u
#define W_MAX_BODY (16u << 20)
#define W_MAX_REQ_BODY (64u << 10)
#define W_DATA_FRAME (1u << 20)
#define W_MAX_PATH 4096u
#define W_MAX_EXTENTS 64u
#define W_MIN_INFO 40u
#define W_EXTENT 24u

enum w_type {
	FT_HELLO = 0x01,
	FT_PUT = 0x10,
	FT_PUT_FILE = 0x11,
	FT_GET = 0x12,
	FT_GET_FILE = 0x13,
	FT_STAT = 0x14,
	FT_LIST = 0x15,
	FT_REMOVE = 0x16,
	FT_STATUS = 0x17,
	FT_GET_FD = 0x18,
	FT_PUT_FD = 0x1B,    /* version 5: carries one descriptor */
	FT_GET_TO_FD = 0x1C, /* version 5: carries one descriptor */
	FT_REMOVE_PREFIX = 0x1D, /* version 6 */
	FT_SET_TTL = 0x1E,       /* version 6 */
	FT_DU = 0x1F,            /* version 6 */
	FT_DATA = 0x20,
	FT_ABORT = 0x21,
	FT_END = 0x22,
	FT_FDS = 0x23,
	FT_OK = 0x30,
	FT_INFO = 0x31,
	FT_LISTING = 0x32,
	FT_STATUS_JSON = 0x33,
	FT_NAMESPACE_JSON = 0x36, /* version 6 */
	FT_PROGRESS = 0x3A,       /* version 8 */
	FT_ERROR = 0x3F
};

/* A string inside a body: not NUL-terminated, valid while the body is. */
struct w_str {
	const uint8_t *p;
	uint32_t n;
};

struct w_info {
	struct w_str name, id, origin;
	uint64_t size;
	uint32_t chunk_size, chunks;
	int64_t time;
	uint32_t flags;
};

struct w_extent {
	uint64_t blob_offset, length, file_offset;
};

/* Header: writes / checks 8 bytes. w_parse_header returns 0, or
 * OMST_EPROTO for nonzero flags/reserved bytes or a body over 16 MiB (the
 * type is not checked: the reader decides what it expects). */
void w_put_header(uint8_t *h, uint8_t type, uint32_t len);
int w_parse_header(const uint8_t *h, uint32_t *len, uint8_t *type);
/* 1 if type is one of the protocol's frame types. */
int w_known_type(uint8_t type);

/* Encoders write a whole frame (header and body) into out and return its
 * length, or 0 if it does not fit in cap. Strings are given with their
 * length; the encoders do not validate them. */
size_t w_enc_hello(uint8_t *out, size_t cap, uint32_t version);
size_t w_enc_put(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size);
/* PUT_FD: the body of a PUT (the descriptor is sent beside the frame). */
size_t w_enc_put_fd(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size);
/* PUT_FILE and GET_FILE: the library no longer sends them (the daemon would
 * open a path with its own rights: served only to its own user); the
 * encoders stay for the shared test vectors. */
size_t w_enc_put_file(uint8_t *out, size_t cap, const char *name, size_t nlen, uint32_t chunk_size,
                      const char *path, size_t plen);
/* GET, STAT, REMOVE, GET_FD, GET_TO_FD (name) and LIST (prefix). */
size_t w_enc_name_req(uint8_t *out, size_t cap, uint8_t type, const char *name, size_t nlen);
size_t w_enc_get_file(uint8_t *out, size_t cap, const char *name, size_t nlen, const char *path,
                      size_t plen);
/* REMOVE_PREFIX (str prefix, u32 flags) and SET_TTL (str scope, u64 ttl
 * in ns); DU is a name request. */
size_t w_enc_remove_prefix(uint8_t *out, size_t cap, const char *prefix, size_t plen, uint32_t flags);
size_t w_enc_set_ttl(uint8_t *out, size_t cap, const char *scope, size_t slen, uint64_t ttl);
/* A frame with an empty body: STATUS, ABORT, END, OK, and the empty DATA. */
size_t w_enc_empty(uint8_t *out, size_t cap, uint8_t type);
/* DATA with a payload (header + copy of the payload; the library itself
 * sends payloads with writev and only uses w_put_header). */
size_t w_enc_data(uint8_t *out, size_t cap, const void *payload, size_t n);

/* Decoders take a body of n bytes, must consume it exactly, and return 0
 * or OMST_EPROTO. */
int w_dec_hello(const uint8_t *b, size_t n, uint8_t magic[4], uint32_t *version);
int w_dec_info(const uint8_t *b, size_t n, struct w_info *in);
int w_dec_error(const uint8_t *b, size_t n, uint32_t *code, struct w_str *msg);
/* FDS: count 1..64, exactly 4 + 24*count bytes. ext has room for 64. */
int w_dec_fds(const uint8_t *b, size_t n, uint32_t *count, struct w_extent *ext);
/* LISTING: checks count against n before decoding; stores the first
 * min(count, cap) Infos in out (out may be NULL when cap is 0). */
int w_dec_listing(const uint8_t *b, size_t n, uint32_t *count, struct w_info *out, size_t cap);
int w_dec_put(const uint8_t *b, size_t n, struct w_str *name, uint32_t *chunk_size);
int w_dec_put_file(const uint8_t *b, size_t n, struct w_str *name, uint32_t *chunk_size, struct w_str *path);
int w_dec_name_req(const uint8_t *b, size_t n, struct w_str *name);
int w_dec_get_file(const uint8_t *b, size_t n, struct w_str *name, struct w_str *path);
int w_dec_remove_prefix(const uint8_t *b, size_t n, struct w_str *prefix, uint32_t *flags);
int w_dec_set_ttl(const uint8_t *b, size_t n, struct w_str *scope, uint64_t *ttl);
int w_dec_empty(const uint8_t *b, size_t n);
/* PROGRESS (version 8): exactly a u64, the bytes of the blob in the file
 * so far. */
int w_dec_progress(const uint8_t *b, size_t n, uint64_t *done);
/* Checks a body against the decoder of its type (any type; unknown types
 * are EPROTO). STATUS_JSON and DATA bodies are accepted as they are. */
int w_check_body(uint8_t type, const uint8_t *b, size_t n);

/* Copies a decoded Info into the public struct. A name over OMST_NAME_MAX
 * bytes is EPROTO; an id or origin longer than its field is truncated
 * (at a UTF-8 boundary). */
int w_info_export(const struct w_info *in, omst_info_t *out);

/* ---- name.c ------------------------------------------------------------- */

/* Checks name as docs section 6.2 says (NULL is OMST_EINVAL, a bad name
 * OMST_EINVALIDNAME) and stores its length. */
int omst_check_name(const char *name, size_t *len);
/* 1 if s[0..n) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF). */
int omst_utf8_valid(const unsigned char *s, size_t n);
/* Makes path absolute against the working directory into a malloc'd
 * string (*out); checks NULL, empty, the 4096-byte limit. */
int omst_abs_path(const char *path, char **out, size_t *len);

/* The socket of this node's daemon of this Slurm job (slurm.c): 1 and a
 * malloc'd path in *out if there is one, else 0. */
int omst_slurm_socket(char **out);
/* chunk_size: 0 or 4096 .. 64 MiB. */
int omst_check_chunk_size(uint32_t cs);

/* ---- localfile.c: the caller's files, with its own rights ---------------- */
/* The rules of the Go package pkg/localfile (docs/rpcbridge.md section
 * 6.12); see localfile.c. Paths given to these functions are absolute
 * (omst_abs_path). Failures are OMST_EIO with errno set and a message
 * naming the path (EACCES for a link or FIFO the rules refuse), or
 * OMST_ENOMEM. */

/* lf_resolve's result for a path through a link in /proc (see there). */
#define LF_MAGIC 1

/* 1 if a process of effective uid follower may follow the link whose lstat
 * is link, found in the directory whose stat is dir: always, unless the
 * directory is sticky and world-writable and neither the follower nor the
 * directory's owner owns the link (Linux's fs.protected_symlinks = 1). */
int lf_may_follow(uid_t follower, const struct stat *link, const struct stat *dir);
/* The permission bits of a file that replaces one of mode old: old's (not
 * its set-id or sticky bits); where the new file could not be given old's
 * group (same_group 0: the caller is not in it), the group's bits cut to
 * the others' (the new group's users were others of the old file). The Go
 * client's localfile.KeptMode. */
mode_t lf_kept_mode(mode_t old, int same_group);
/* Resolves the absolute path to one without symbolic links (malloc'd into
 * *out), following each link on the way only if lf_may_follow allows it for
 * uid; at most 40 links; ".." lexical on the resolved prefix. Every
 * component but the last must exist. Returns 0; or LF_MAGIC when a link's
 * directory is on procfs (a "magic" link such as /proc/self/fd/0, whose
 * target is an open file): *out is then the path up to and through that
 * link and the rest, for the kernel to open; or a negative code. */
int lf_resolve(const char *path, uid_t uid, char **out);
/* Opens path for reading (O_RDONLY|O_CLOEXEC) with the caller's rights,
 * links followed as lf_resolve allows; a directory is refused (EISDIR).
 * Opening a FIFO waits for a writer's bytes (or a writer come and gone),
 * at most timeout_ms (then ETIMEDOUT, "no writer opened the FIFO"). */
int lf_open_read(const char *path, int timeout_ms, int *fd);

/* The destination of a get: the daemon writes into fd; then lf_commit or
 * lf_abort (exactly one of them, once). */
struct lf_dest {
	int fd;      /* open for writing */
	int regular; /* fd is a temporary file beside the destination */
	int dfd;     /* the destination's directory (regular only) */
	char *temp;  /* the temporary file's name in it */
	char *base;  /* the destination's name in it */
	int done;
};
/* Prepares path as the destination of a get, with the caller's rights: a
 * regular file, or a path where nothing exists, gets a new temporary file
 * beside it (links followed as lf_resolve allows: the target is replaced,
 * not the link); an existing FIFO or device is opened for writing in place
 * (waiting for a FIFO's reader at most timeout_ms, then ETIMEDOUT; another
 * user's FIFO in a sticky world-writable directory is refused); a
 * directory is refused (EISDIR). */
int lf_create(const char *path, int timeout_ms, struct lf_dest *d);
/* Closes d's file and, for a temporary file, renames it onto the
 * destination (the temporary file is removed if that fails). Errors name
 * path. */
int lf_commit(struct lf_dest *d, const char *path);
/* Closes d's file and removes a temporary file: the destination is as it
 * was (a FIFO or device keeps what was written). errno is kept. */
void lf_abort(struct lf_dest *d);

/* ---- conn.c ------------------------------------------------------------- */

#define CONN_RBUF (64u << 10)
#define CONN_FDQ 256u

/* One connection to the daemon. Not thread-safe: one user at a time (the
 * handle's pool hands it out). */
struct omst_conn {
	int fd;
	uint32_t version;  /* negotiated protocol version */
	int timeout_ms;    /* per-wait IO timeout */
	int broken;        /* stream out of step: close, do not reuse */
	int used;          /* has carried a request */
	uint64_t nsent;    /* bytes written to the socket */
	int watch;         /* conn_watch: 0 none, 1 a regular file, 2 a stream */
	int watch_fd;
	int64_t watch_last[4];
	uint8_t *rb;       /* read buffer, CONN_RBUF bytes */
	size_t rpos, rend; /* unread bytes are rb[rpos..rend) */
	uint8_t *body;     /* reusable body buffer for control frames */
	size_t bodycap;
	int fdq[CONN_FDQ]; /* descriptors received and not yet taken, FIFO */
	unsigned fdq_head, fdq_n;
	int ctrunc;        /* MSG_CTRUNC seen: descriptors were lost */
	struct omst_conn *next, *prev; /* handle's list of all connections */
	struct omst_conn *inext;       /* handle's idle stack */
};

/* Connects to path and exchanges HELLO asking for version. No daemon:
 * OMST_ENODAEMON. A daemon ERROR reply is returned as its code (e.g.
 * OMST_EVERSION). */
int conn_open(const char *path, int timeout_ms, uint32_t version, struct omst_conn **out);
void conn_close(struct omst_conn *c);
/* Sends iov[0..n) completely (MSG_NOSIGNAL; EINTR, short writes and the
 * timeout handled). Errors mark the connection broken. */
int conn_sendv(struct omst_conn *c, struct iovec *iov, int n);
int conn_send(struct omst_conn *c, const void *p, size_t n);
/* Sends the frame p[0..n) with the descriptor fd attached to its first
 * byte (one sendmsg with SCM_RIGHTS; the rest, if the first write is short,
 * plain). A descriptor that cannot be passed (EBADF) is OMST_EINVAL with
 * nothing sent and the connection intact. */
int conn_send_fd(struct omst_conn *c, const void *p, size_t n, int fd);
/* Watches the caller's file fd while the daemon reads or writes it for the
 * request (fd -1: stop). Meanwhile a wait for the daemon's reply that
 * reaches the timeout goes on as long as the file shows progress: for a
 * regular file, a change of its offset, size or modification time since
 * the last check; a stream (pipe, FIFO, device) shows none the library can
 * see, so the wait is left to the daemon, which bounds each read or write
 * of a stream by its own IO timeout and answers ERROR TIMEOUT. */
void conn_watch(struct omst_conn *c, int fd);
/* Reads and checks one frame header. EOF is OMST_ECONN. */
int conn_read_header(struct omst_conn *c, uint32_t *len, uint8_t *type);
/* Reads exactly n bytes into dst (large reads go straight to dst). */
int conn_read(struct omst_conn *c, void *dst, size_t n);
/* Reads a body of n bytes into the connection's reusable buffer. */
int conn_read_body(struct omst_conn *c, size_t n, const uint8_t **body);
/* Reads and discards n bytes. */
int conn_skip(struct omst_conn *c, size_t n);
/* Takes n descriptors from the FIFO (OMST_EPROTO if fewer are queued). */
int conn_take_fds(struct omst_conn *c, int *fds, unsigned n);
/* Closes every queued descriptor; returns how many there were. */
unsigned conn_drop_fds(struct omst_conn *c);
/* 1 if the connection looks usable for a new request (no pending bytes,
 * not closed by the daemon). */
int conn_idle_ok(struct omst_conn *c);
/* Marks c broken and returns code. */
int conn_break(struct omst_conn *c, int code);
/* Decodes an ERROR body: its code, the message the thread's (ops.c). */
int error_reply(struct omst_conn *c, const uint8_t *body, size_t len);

/* ---- buf.c -------------------------------------------------------------- */

struct omst_buf {
	uint8_t *base;     /* mapping of maplen bytes, or NULL for an empty blob */
	size_t maplen;
	size_t size;       /* blob bytes */
	size_t filled;     /* bytes placed so far (next expected blob offset) */
	size_t copy_from;  /* page-aligned offset from which the buffer is anonymous */
	int zero_copy;     /* every byte mapped from the daemon's files */
	int fd_mode;       /* built from descriptors (GET_FD) */
	unsigned flags;
	omst_info_t info;
	uint8_t empty[8];  /* data of an empty blob */
};

/* A buffer of info->size bytes in anonymous memory (plain GET). */
int buf_new_anon(const omst_info_t *info, unsigned flags, omst_buf_t **out);
/* A buffer for GET_FD: a PROT_NONE reservation that extents are mapped over. */
int buf_new_reserved(const omst_info_t *info, unsigned flags, omst_buf_t **out);
/* Places one extent read from fd (the descriptor is not closed here):
 * maps it when offsets allow, else copies it with pread. Extents must come
 * in blob order without gaps (OMST_EPROTO otherwise). */
int buf_add_extent(omst_buf_t *b, const struct w_extent *e, int fd);
/* Ends filling: checks that every byte was placed, sets the protection. */
int buf_finish(omst_buf_t *b);
size_t buf_page_size(void);

/* ---- ops.c: one request on one connection -------------------------------- */

int op_put(struct omst_conn *c, const char *name, size_t nlen, const void *data, size_t size,
           uint32_t chunk_size, omst_info_t *info);
/* GET into buf of size bytes; OMST_ESIZE (nothing read into buf) when the
 * blob's size differs. */
int op_get(struct omst_conn *c, const char *name, size_t nlen, void *buf, size_t size, omst_info_t *info);
/* GET into a new anonymous library buffer. */
int op_get_anon(struct omst_conn *c, const char *name, size_t nlen, unsigned flags, omst_buf_t **out);
/* GET_FD into a new mapped library buffer (version 2 connections only). */
int op_get_fd(struct omst_conn *c, const char *name, size_t nlen, unsigned flags, omst_buf_t **out);
int op_stat(struct omst_conn *c, const char *name, size_t nlen, omst_info_t *info);
int op_remove(struct omst_conn *c, const char *name, size_t nlen);
/* Sends the request frame req[0..n) (REMOVE_PREFIX, SET_TTL or DU, version
 * 6 connections only) and reads NAMESPACE_JSON or ERROR; the JSON becomes
 * the thread's omst_last_json(). */
int op_namespace(struct omst_conn *c, const uint8_t *req, size_t n);
/* The unsigned integer (or, for json_num, number) of the top-level key of
 * the thread's last JSON reply; 0 if it has none. */
uint64_t json_u64(const char *key);
double json_num(const char *key);
/* PUT_FD (version 5 connections only): the daemon reads the caller's file
 * fd (a regular file from its offset to its size, unchanged; anything else
 * to its end of file). The wait for INFO is watched (conn_watch). */
int op_put_fd(struct omst_conn *c, const char *name, size_t nlen, uint32_t chunk_size, int fd, omst_info_t *info);
/* GET_TO_FD (version 5 connections only): the daemon writes the blob into
 * fd (a regular file not O_APPEND: exactly the blob from offset 0, cut to
 * its size; else in order); INFO, then (version 8) PROGRESS frames, each
 * checked with progress_check and passed to cb if not NULL, then END or
 * ERROR. On a connection of version 8 END must follow a PROGRESS of
 * info->size; below 8, cb is called once with info->size at END. A
 * non-zero return of cb stops the get: the connection is broken (which
 * cancels the request in the daemon) and that value returned. */
int op_get_to_fd(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_progress_cb cb, void *arg,
                 omst_info_t *info);
/* The client's rule for a PROGRESS frame of done bytes after one of last,
 * in a reply whose INFO said size (docs/rpcbridge.md 6.15): 0, or
 * OMST_EPROTO with the thread's message saying why (it went back, or
 * exceeds the size). Pure but for the message. */
int progress_check(uint64_t done, uint64_t last, uint64_t size);
/* op_put_fd for a daemon older than version 5: PUT, the file read here
 * with the same rules (a regular file that shrinks, grows or is modified
 * meanwhile is ABORTed: OMST_EIO "file changed while it was read"). The
 * PUT frame is sent before anything is read. */
int op_put_stream(struct omst_conn *c, const char *name, size_t nlen, uint32_t chunk_size, int fd, omst_info_t *info);
/* op_get_to_fd for a daemon older than version 5: GET, the bytes written
 * here with the same rules (pwrite from 0 and ftruncate, else write). A
 * failed write drops the connection (which cancels the request):
 * OMST_EIO with errno set. */
int op_get_stream(struct omst_conn *c, const char *name, size_t nlen, int fd, omst_info_t *info);

/* ---- api.c ---------------------------------------------------------------- */

/* Takes a connection of h for one request (an idle one, else a new one). */
int handle_acquire(omst_t *h, struct omst_conn **out);
/* Returns c to h's pool, or closes it if it is broken. */
void handle_release(omst_t *h, struct omst_conn *c);
/* Internal get shared by omst_get and the async worker. */
int handle_get(omst_t *h, const char *name, size_t nlen, void *buf, size_t size, omst_info_t *info);

#endif /* OMST_INTERNAL_H */
