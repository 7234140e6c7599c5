/* rpc_impl.h - what the RPC session implementations share (internal). */
#ifndef DISCO_SCHEDULER_RPC_IMPL_H
#define DISCO_SCHEDULER_RPC_IMPL_H

/** A process-unique index for a new session (for device tagging). */
int disco__rpc_next_index(void);

#endif
