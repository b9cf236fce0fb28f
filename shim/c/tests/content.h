/* C copy of vodkit_workload::content: the byte at offset o of the file whose relative path
 * is p is byte (o % 8) of splitmix64(fnv1a64(p) ^ (o / 8)), little-endian. */
#ifndef VK_TEST_CONTENT_H
#define VK_TEST_CONTENT_H
#include <stddef.h>
#include <stdint.h>

static inline uint64_t vk_path_key(const char *p) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x00000100000001b3ULL;
    }
    return h;
}

static inline uint64_t vk_splitmix64(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline unsigned char vk_byte(uint64_t key, uint64_t off) {
    return (unsigned char)(vk_splitmix64(key ^ (off / 8)) >> (8 * (off % 8)));
}

/* Offset of the first wrong byte of data read at `off`, or -1 when all are right. */
static inline long vk_first_mismatch(uint64_t key, uint64_t off, const unsigned char *data, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (data[i] != vk_byte(key, off + i)) return (long)i;
    return -1;
}
#endif
