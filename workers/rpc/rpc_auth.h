/* rpc_auth.h - the crypto of the RPC handshake (internal; the protocol steps
 * A1-A4 are in disco/rpc.h). libsodium does the work: random bytes,
 * HMAC-SHA256, constant-time comparison. */
#ifndef DISCO_WORKERS_RPC_AUTH_H
#define DISCO_WORKERS_RPC_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "disco/rpc.h"

#define DISCO__RPC_NONCE_BYTES     32
#define DISCO__RPC_PROOF_BYTES     32
#define DISCO__RPC_AUTH_MAX_PACKET 4096 /* the largest packet read before A4 */

enum disco__rpc_role { DISCO__RPC_CLIENT = 0, DISCO__RPC_SERVER = 1 };

/** Fills buf with n random bytes (libsodium). Thread-safe. Returns DISCO_OK,
 *  DISCO_E_SYS (libsodium could not start). */
disco_status_t disco__rpc_random(void *buf, size_t n);

/** proof = HMAC-SHA256(token, label(role) || client_nonce || server_nonce). */
void disco__rpc_proof(const uint8_t token[DISCO_RPC_TOKEN_BYTES], enum disco__rpc_role role,
                      const uint8_t cn[DISCO__RPC_NONCE_BYTES],
                      const uint8_t sn[DISCO__RPC_NONCE_BYTES],
                      uint8_t out[DISCO__RPC_PROOF_BYTES]);

/** Whether proof (len bytes) is role's proof for these nonces; constant time. */
bool disco__rpc_proof_ok(const uint8_t token[DISCO_RPC_TOKEN_BYTES], enum disco__rpc_role role,
                         const uint8_t cn[DISCO__RPC_NONCE_BYTES],
                         const uint8_t sn[DISCO__RPC_NONCE_BYTES], const void *proof, size_t len);

#endif
