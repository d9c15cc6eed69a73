// Placeholder until the TCP store lands (helper in progress).
#include "collectives/tcp_store.h"
