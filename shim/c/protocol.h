/*
 * Wire format between the vodkit preload library and `vodkit prefetchd`.
 *
 * One request per seqpacket message, with the file descriptor attached as SCM_RIGHTS; one
 * reply per request, except for notes of resident reads (VK_FLAG_RESIDENT), which tell the
 * daemon what was read from memory so that its policy sees the whole access stream. All fields are native-endian (both ends run on the same host). The
 * Rust side (shim/src/protocol.rs) mirrors these layouts and checks their sizes.
 */
#ifndef VODKIT_PRELOAD_PROTOCOL_H
#define VODKIT_PRELOAD_PROTOCOL_H
#include <stdint.h>

#define VK_MAGIC 0x564b5046u /* "VKPF" */
#define VK_VERSION 1

/* Which call missed the page cache (for the daemon's accounting). */
#define VK_OP_READ 1
#define VK_OP_PREAD 2
#define VK_OP_READV 3
#define VK_OP_SENDFILE 4
#define VK_OP_COPY 5
#define VK_OP_SPLICE 6

/* Request flags. */
#define VK_FLAG_RESIDENT 1u /* the range was in memory: an accounting note, never answered */

/* Reply status. */
#define VK_STATUS_DONE 0          /* the daemon read what was needed; go on */
#define VK_STATUS_PREFETCH_HERE 1 /* read [offset, offset+len) yourself, then go on */
#define VK_STATUS_SKIPPED 2       /* nothing was read (tracking only, or nothing needed) */
#define VK_STATUS_ERROR 3         /* the daemon failed; go on anyway */

struct vk_request {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint32_t pid;
    uint32_t flags;     /* VK_FLAG_* */
    uint64_t offset;    /* first byte the call asks for */
    uint64_t len;       /* bytes asked for, clamped to the file size */
    uint64_t file_size; /* size of the file when the call was made */
    uint64_t seq;       /* per-process request number, echoed in the reply */
};

struct vk_reply {
    uint32_t magic;
    uint32_t status;
    uint64_t seq;
    uint64_t offset; /* for VK_STATUS_PREFETCH_HERE */
    uint64_t len;
};

_Static_assert(sizeof(struct vk_request) == 48, "request layout");
_Static_assert(sizeof(struct vk_reply) == 32, "reply layout");
#endif
