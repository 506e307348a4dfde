// verbs:// URIs and their RC options: every form the provider accepts, and a sentence for
// every form it does not.
#include <gtest/gtest.h>

#include <string>

#include "core/transport/provider_uri.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport {
namespace {

using verbs::parse_verbs_options;
using verbs::VerbsOptions;

std::string error_of(std::string_view uri) {
  auto parsed = parse_provider_uri(uri);
  return parsed ? std::string("(parsed)") : parsed.error();
}

TEST(VerbsUri, AddressAndPort) {
  auto uri = parse_provider_uri("verbs://10.0.2.15:7000");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  EXPECT_EQ(uri->scheme, "verbs");
  EXPECT_EQ(uri->host, "10.0.2.15");
  EXPECT_EQ(uri->port, 7000);
  EXPECT_TRUE(uri->query.empty());
  EXPECT_EQ(uri->to_string(), "verbs://10.0.2.15:7000");
}

TEST(VerbsUri, DeviceWithoutPortStaysParseable) {
  auto uri = parse_provider_uri("verbs://siw0");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  EXPECT_EQ(uri->host, "siw0");
  EXPECT_EQ(uri->port, 0);
  EXPECT_EQ(uri->to_string(), "verbs://siw0");
  auto with_port = parse_provider_uri("verbs://mlx5_0:7000");
  ASSERT_TRUE(with_port.has_value());
  EXPECT_EQ(with_port->host, "mlx5_0");
  EXPECT_EQ(with_port->port, 7000);
}

TEST(VerbsUri, HostNames) {
  auto uri = parse_provider_uri("verbs://lab-b.example:7174");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  EXPECT_EQ(uri->host, "lab-b.example");
  EXPECT_EQ(uri->port, 7174);
}

TEST(VerbsUri, Ipv6InBrackets) {
  auto uri = parse_provider_uri("verbs://[fe80::1%eth0]:7000");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  EXPECT_EQ(uri->host, "fe80::1%eth0");
  EXPECT_EQ(uri->port, 7000);
  EXPECT_EQ(uri->to_string(), "verbs://[fe80::1%eth0]:7000");
  auto no_port = parse_provider_uri("verbs://[::1]");
  ASSERT_TRUE(no_port.has_value());
  EXPECT_EQ(no_port->port, 0);
}

TEST(VerbsUri, OptionsAreKeptInOrderAndRoundTrip) {
  auto uri = parse_provider_uri("verbs://10.0.2.15:7000?retry_count=2&ack_timeout=14");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  ASSERT_EQ(uri->query.size(), 2u);
  EXPECT_EQ(uri->query[0], (std::pair<std::string, std::string>{"retry_count", "2"}));
  EXPECT_EQ(uri->query[1], (std::pair<std::string, std::string>{"ack_timeout", "14"}));
  EXPECT_EQ(uri->to_string(), "verbs://10.0.2.15:7000?retry_count=2&ack_timeout=14");
  auto again = parse_provider_uri(uri->to_string());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *uri);
}

TEST(VerbsUri, SaysWhatIsWrongWithTheAddress) {
  EXPECT_NE(error_of("verbs://").find("needs an address or device"), std::string::npos);
  EXPECT_NE(error_of("verbs://:7000").find("before the port"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:").find("empty port"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:70000").find("0 to 65535"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7x").find("0 to 65535"), std::string::npos);
  EXPECT_NE(error_of("verbs://fe80::1:7000").find("brackets"), std::string::npos);
  EXPECT_NE(error_of("verbs://[fe80::1").find("unclosed"), std::string::npos);
  EXPECT_NE(error_of("verbs://[fe80::1]7000").find("':PORT'"), std::string::npos);
  EXPECT_NE(error_of("verbs://[siw0]:1").find("not an IPv6 address"), std::string::npos);
  EXPECT_NE(error_of("verbs://user@host:1").find("not an IP address, device or host name"),
            std::string::npos);
}

TEST(VerbsUri, SaysWhatIsWrongWithTheOptions) {
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?").find("empty option list"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?ack_timeout").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?ack_timeout=").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?=3").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?retry_count=2&").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?Retry=2").find("cannot have"), std::string::npos);
  EXPECT_EQ(error_of("verbs://10.0.2.15:7000?timeout=3"),
            "unknown verbs URI option 'timeout' (known: ack_timeout, retry_count, rnr_retry, "
            "source)");
  EXPECT_EQ(error_of("verbs://10.0.2.15:7000?retry_count=9"),
            "verbs URI option retry_count=9 is out of range: 0 to 7");
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?ack_timeout=32").find("0 to 31"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?ack_timeout=-1").find("not a decimal number"),
            std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?rnr_retry=0x3").find("not a decimal number"),
            std::string::npos);
  EXPECT_NE(error_of("verbs://10.0.2.15:7000?retry_count=1&retry_count=2").find("twice"),
            std::string::npos);
}

TEST(VerbsUri, OtherSchemesKeepTheirRules) {
  EXPECT_NE(error_of("tcp://10.0.2.15:7000?ack_timeout=3").find("0 to 65535"), std::string::npos);
  EXPECT_NE(error_of("10.0.2.15:7000").find("verbs://ADDRESS:PORT"), std::string::npos);
  EXPECT_EQ(error_of("sim://seed=7"),
            "unknown provider scheme 'sim': known schemes are tcp and verbs");
}

TEST(VerbsOptions, DefaultsAreLibrdmacmsAndTheCmsTimeout) {
  auto options = parse_verbs_options({});
  ASSERT_TRUE(options.has_value());
  EXPECT_EQ(*options, VerbsOptions{});
  EXPECT_FALSE(options->ack_timeout.has_value());
  EXPECT_EQ(options->retry_count, 7);
  EXPECT_EQ(options->rnr_retry_count, 7);
}

TEST(VerbsOptions, ReadsEachKnob) {
  auto options =
      parse_verbs_options({{"ack_timeout", "0"}, {"retry_count", "0"}, {"rnr_retry", "3"}});
  ASSERT_TRUE(options.has_value()) << options.error();
  EXPECT_EQ(options->ack_timeout, 0);
  EXPECT_EQ(options->retry_count, 0);
  EXPECT_EQ(options->rnr_retry_count, 3);
  auto max = parse_verbs_options({{"ack_timeout", "31"}, {"retry_count", "7"}, {"rnr_retry", "7"}});
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(max->ack_timeout, 31);
}

TEST(VerbsOptions, ReadsTheSourceAddressAsGiven) {
  auto options = parse_verbs_options({{"source", "10.9.0.2"}, {"retry_count", "2"}});
  ASSERT_TRUE(options.has_value()) << options.error();
  EXPECT_EQ(options->source, "10.9.0.2");
  EXPECT_EQ(options->retry_count, 2);
  auto uri = parse_provider_uri("verbs://10.9.0.1:7000?source=fe80::1%veth-b");
  ASSERT_TRUE(uri.has_value()) << uri.error();
  EXPECT_EQ(uri->to_string(), "verbs://10.9.0.1:7000?source=fe80::1%veth-b");
  EXPECT_NE(error_of("verbs://10.9.0.1:7000?source=[::1]").find("cannot have"), std::string::npos);
  EXPECT_NE(error_of("verbs://10.9.0.1:7000?source=a&source=b").find("twice"), std::string::npos);
}

TEST(VerbsOptions, RejectsNumbersThatAreNotPlainDecimal) {
  for (const char* bad : {"", "+1", " 1", "1 ", "1.0", "99999999999999999999"}) {
    EXPECT_FALSE(parse_verbs_options({{"retry_count", bad}}).has_value()) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace rdma_interop::transport
