// The desync check switch. With DTR_DEBUG_COLLECTIVES=1 (read at first use) or
// set_debug_collectives(true), each collective first exchanges a description of
// the call between the members (a small blocking all-gather) and every rank
// raises a dtr::Error listing each rank's op, sequence number, dtype and shapes
// when they differ. Costs one extra round trip per collective: a debugging aid.
// The exchange is under the collective timeout too (DTR_COLLECTIVE_TIMEOUT): a
// member that never arrives ends the process with an error naming it.
#pragma once

namespace dtr::mesh {

bool debug_collectives();
void set_debug_collectives(bool on);

}  // namespace dtr::mesh
