#include "tools/common/retry_option.h"

#include <algorithm>
#include <string>

#include "tools/common/duration_option.h"

namespace rdma_interop::tools {

using std::chrono::milliseconds;

milliseconds RetryBackoff::cap() const {
  if (max_ms) return milliseconds(*max_ms);
  return std::min<milliseconds>(milliseconds(30000), 50 * base());
}

void add_retry_backoff_options(CLI::App* app, RetryBackoff& backoff) {
  app->add_option("--retry-backoff", backoff.base_ms,
                  "The base of the full-jitter backoff: before retry n, a random wait in "
                  "[0, min(MAX, BASE * 2^(n-1))] (default " +
                      duration_text(backoff.base()) + "; a bare number is milliseconds)")
      ->type_name("DURATION")
      ->transform(whole_duration_in(milliseconds(0), milliseconds(60000), TimeUnit::kMilliseconds));
  app->add_option("--retry-backoff-max", backoff.max_ms,
                  "MAX, the cap of that wait (default 50 x --retry-backoff, at most 30s; a bare "
                  "number is milliseconds)")
      ->type_name("DURATION")
      ->transform(
          whole_duration_in(milliseconds(0), milliseconds(600000), TimeUnit::kMilliseconds));
}

}  // namespace rdma_interop::tools
