// mesh_config.h - one mesh node, as the command line describes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/transport/provider_uri.h"
#include "core/util/expected.h"

namespace rdma_interop::mesh {

using Millis = std::chrono::milliseconds;

// Another node of the mesh: its name (unique in the mesh) and where it listens.
struct PeerSpec {
  std::string name;
  transport::ProviderUri uri;
};

enum class TrafficMode : std::uint8_t {
  kStream,        // one-way messages to every peer; the receiver only counts them
  kRequestReply,  // requests to every peer; every request is answered with reply()
};

struct MeshConfig {
  std::string name;               // this node's name; of a pair, the lower name connects
  transport::ProviderUri listen;  // the peers whose names sort before ours connect here
  std::vector<PeerSpec> peers;

  double duration_s = 10;   // the measured run, from the start barrier
  std::uint32_t size = 64;  // payload octets of every request and stream message
  double rate = 2000;       // messages/s per peer; 0: as fast as credits allow
  TrafficMode mode = TrafficMode::kStream;
  std::uint32_t handler_delay_us = 0;  // the slow consumer: time per received message
  // Negative control: one FIFO for all peers; a refused head blocks every message behind it.
  bool shared_queue = false;

  // Endpoint (core/messaging/message_endpoint.h EndpointConfig).
  std::uint32_t window = 16;
  std::uint32_t control_receives = 2;
  std::uint32_t queue_limit = 64;
  std::uint32_t max_message = 4096;
  std::uint32_t send_depth = 0;  // 0: window + control send slots (2)
  bool ignore_credits = false;   // misbehaving-peer personality

  Millis report_interval{500};
  Millis drain{500};            // after the run: no new sends, replies still counted
  double setup_timeout_s = 20;  // listen + connect + accept + start barrier
  bool json = false;
  bool fail_on_peer_error = false;
};

// A node name: 1..64 of [A-Za-z0-9_.-] (it travels in the MPA private data).
bool valid_node_name(std::string_view name);
// "NAME=tcp://ADDR:PORT" -> PeerSpec; errors are sentences naming the bad part.
Expected<PeerSpec, std::string> parse_peer_spec(std::string_view text);
// The whole configuration's consistency: names unique and not ours, every URI of the
// listener's scheme with a port, size <= max_message, window and queue numbers in range.
// Empty when it is fine, else one sentence.
std::string check_config(const MeshConfig& config);

}  // namespace rdma_interop::mesh
