// The provider registry: the one list of the schemes this build opens, which the URI
// parser's errors and open_provider's must name alike.
#include <gtest/gtest.h>

#include <string>

#include "core/transport/provider.h"
#include "core/transport/provider_registry.h"
#include "core/transport/provider_uri.h"

namespace rdma_interop::transport {
namespace {

TEST(ProviderRegistry, EveryRegisteredSchemeOpensTheProviderOfThatScheme) {
  ASSERT_FALSE(registered_providers().empty());
  for (const auto& entry : registered_providers()) {
    EXPECT_EQ(find_provider(entry.scheme), &entry);
    auto provider = open_provider(entry.scheme);
    ASSERT_TRUE(provider) << provider.error();
    EXPECT_EQ((*provider)->scheme(), entry.scheme);
  }
  EXPECT_EQ(find_provider("ftp"), nullptr);
}

TEST(ProviderRegistry, ErrorsNameTheRegisteredSchemes) {
  EXPECT_EQ(known_schemes(), "tcp and verbs");
  EXPECT_EQ(known_uri_forms(), "tcp://ADDRESS:PORT, verbs://ADDRESS:PORT or verbs://DEVICE");
  auto unknown = parse_provider_uri("ftp://x");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().find("known schemes are tcp and verbs"), std::string::npos)
      << unknown.error();
  auto no_scheme = parse_provider_uri("198.18.0.2:1");
  ASSERT_FALSE(no_scheme);
  EXPECT_NE(no_scheme.error().find(known_uri_forms()), std::string::npos) << no_scheme.error();
  auto none = open_provider("ftp");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error(), "no provider for scheme 'ftp': this build has tcp and verbs");
}

}  // namespace
}  // namespace rdma_interop::transport
