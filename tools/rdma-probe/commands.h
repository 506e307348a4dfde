// commands.h - rdma-probe's subcommands, each a function of its parsed options that
// returns the process exit status (exit_codes.h). main.cc only parses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cm/personality.h"
#include "core/util/expected.h"
#include "tools/common/retry_option.h"

namespace rdma_interop::probe {

struct PersonalityChoice {
  std::string name_or_path;
  std::vector<std::string> extra_dirs;  // --personality-dir, searched first
};

struct ServeOptions {
  std::string listen;  // tcp://ADDR:PORT
  PersonalityChoice personality;
  bool json = false;        // JSON lines instead of the log
  int max_connections = 0;  // 0: until a signal
  bool once = false;
  double exchange_timeout_s = 10.0;
  double idle_timeout_s = 5.0;  // a silent peer holds a worker at most this long
  bool list_personalities = false;
  // The listener's backlog policy (transport::ListenOptions).
  int backlog = 16;
  std::string overflow = "reject";  // "drop" | "reject"
  int half_open_limit = 0;          // 0: max(4 * backlog, 64)
  int decision_timeout_ms = 30000;
  int overflow_timeout_ms = 5000;  // drop: how long a request waits unanswered for a slot
  int accept_delay_ms = 0;         // a deliberately slow acceptor: wait before each accept
  bool backlog_events = false;     // print a "backlog" line per slot taken or freed
};

struct ConnectOptions {
  std::string uri;
  PersonalityChoice personality;
  double timeout_s = 15.0;
  std::optional<int> first_fpdu_delay_ms;  // overrides the personality's
  bool json = false;
  int retries = 0;                    // transport::ConnectOptions::retries
  tools::RetryBackoff retry_backoff;  // --retry-backoff, --retry-backoff-max
};

struct ProbeOptions {
  std::string uri;
  bool json = false;
  double timeout_s = 3.0;        // each probe connection
  int rtr_wait_ms = 2000;        // how long the RTR probe withholds the RTR
  int first_fpdu_delay_ms = 50;  // after the Reply (kernel siw as responder needs it)
  int max_connections = 48;
  bool evidence = false;  // the table lists each probe's offer and answer
  bool quiet = false;     // no progress line on a terminal
  // The personalities the fingerprint knows: these directories first, then the defaults.
  std::vector<std::string> personality_dirs;
};

struct ListOptions {
  std::vector<std::string> extra_dirs;
  bool json = false;
};

struct XrcOptions {
  std::vector<std::string> devices;  // --device; empty: every device present
  bool json = false;
  std::optional<std::uint64_t> simulate_seed;  // --simulate SEED
  bool events = false;                         // --events: the engine's decisions, in order
  bool trace = false;                          // --trace: every fabric step
  std::string probe_kind;                      // --probe, overrides the seed's choice
  std::optional<int> interval_ms;              // --probe-interval
  std::optional<int> retries;                  // --probe-retries
};

struct DevicesOptions {
  std::vector<std::string> devices;  // --device; empty: every device present
  bool json = false;
};

int run_serve(const ServeOptions& options);
int run_devices(const DevicesOptions& options);
int run_xrc(const XrcOptions& options);
int run_connect(const ConnectOptions& options);
int run_list_personalities(const ListOptions& options);
int run_probe(const ProbeOptions& options);

// Resolves --personality; the error is a sentence for stderr (exit status 2).
Expected<cm::Personality, std::string> resolve_personality(const PersonalityChoice& choice);

// "rdma-probe <command>: error: <text>" on stderr.
void print_usage_error(const char* command, const std::string& text);

}  // namespace rdma_interop::probe
