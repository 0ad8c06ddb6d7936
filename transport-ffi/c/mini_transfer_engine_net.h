/*
 * The cross-process half of mini_transfer_engine (internal to the library; see
 * mini_transfer_engine.h for the public contract).
 *
 * Metadata: a directory (metadata_conn_string "file:///abs/dir") holding one file per exported
 * segment, named after the segment (bytes outside [A-Za-z0-9._-] escaped as %XX), containing
 * "host:port\n" of the engine serving it. A file is replaced atomically (rename).
 *
 * Wire protocol on the serving engine's listener (all integers little-endian), any number of
 * requests per connection, one at a time:
 *   request  = magic u32 (MTE_MAGIC) | opcode u8 | reserved u8 | name_len u16 |
 *              offset u64 | length u64 | name[name_len]
 *   answer   = status u8 (MTE_OK, MTE_OUT_OF_RANGE, MTE_NOT_FOUND, MTE_BAD_REQUEST)
 *   then, on MTE_OK: READ  -> the server sends `length` bytes;
 *                    WRITE -> the client sends `length` bytes and the server answers a second
 *                             status u8 once they are in the segment.
 * The server checks [offset, offset + length) against the segment before any byte moves
 * (overflow-safe), and again for every chunk it copies, under the engine's lock: a segment
 * unregistered or replaced meanwhile is never read or written outside its memory. A request
 * that breaks the framing (bad magic, name too long) closes the connection.
 */
#ifndef MINI_TRANSFER_ENGINE_NET_H
#define MINI_TRANSFER_ENGINE_NET_H

#include <stddef.h>
#include <stdint.h>

#define MTE_MAX_NAME 256
#define MTE_MAX_ENDPOINT 300
#define MTE_MAX_PATH 4096
#define MTE_MAGIC 0x3145544DU /* "MTE1" */

#define MTE_OK 0
#define MTE_OUT_OF_RANGE 1
#define MTE_NOT_FOUND 2
#define MTE_BAD_REQUEST 3

/* Implemented by the core (mini_transfer_engine.c): under the engine lock, copies `len` bytes
 * between `buf` and exported segment `name` at `offset` (write = 1: buf -> segment). With
 * buf == NULL only checks the range. Returns MTE_OK, MTE_NOT_FOUND or MTE_OUT_OF_RANGE. */
int mte_exported_copy(const char *name, uint64_t offset, void *buf, uint64_t len, int write);

struct mte_listener;

/* Starts serving exported segments on host:port (port 0: ephemeral); writes the endpoint
 * peers dial ("host:port") into `endpoint`. NULL on failure. */
struct mte_listener *mte_listener_start(const char *host, uint64_t port, char *endpoint,
                                        size_t endpoint_size);
/* Stops accepting and joins the accept thread (open connections finish on their own). */
void mte_listener_stop(struct mte_listener *listener);

/* Metadata directory: publish (0 on success), look up (0 and `endpoint` filled if known), and
 * withdraw (only if the file still names `endpoint`). */
int mte_metadata_publish(const char *dir, const char *name, const char *endpoint);
int mte_metadata_lookup(const char *dir, const char *name, char *endpoint, size_t size);
void mte_metadata_withdraw(const char *dir, const char *name, const char *endpoint);

/* A client connection, reused across the remote tasks of one submitTransfer call. */
struct mte_conn {
    int fd;
    char endpoint[MTE_MAX_ENDPOINT + 1];
};

/* One transfer against segment `name` served at `endpoint`: a transfer_status status value
 * (STATUS_COMPLETED, STATUS_INVALID for a range outside the segment, STATUS_FAILED). */
int mte_remote_transfer(struct mte_conn *conn, const char *endpoint, const char *name,
                        int opcode, uint64_t offset, void *source, uint64_t length);
void mte_conn_close(struct mte_conn *conn);

#endif /* MINI_TRANSFER_ENGINE_NET_H */
