// peer_probe.h - `rdma-probe URI`: what a peer speaks, found out by connecting to it.
//
// Over tcp:// every MPA choice of a responder is probed (mpa_probes.h), then what it does
// on an established connection (data_path_probes.h). Over verbs:// the kernel negotiates
// MPA (or the IB CM does) and user space cannot choose the offer: those rows are n/a, and
// the connection-level probes run through rdma-core. The connections are made one at a
// time, paced and counted (probe_session.h); a run against a well-behaved local peer takes
// about 25 connections and a second or two, plus --rtr-wait.
#pragma once

#include "core/transport/provider.h"
#include "tools/rdma-probe/probe_report.h"
#include "tools/rdma-probe/probe_session.h"

namespace rdma_interop::probe {

ProbeReport probe_peer(const ProbeSettings& settings, transport::Provider& provider);

}  // namespace rdma_interop::probe
