// rdma-probe's fingerprint (tools/rdma-probe/fingerprint.h): what the probe would observe of
// each known stack, and which one an observation matches. The expected traits are spelled
// out here from the kernel behaviour tools/personalities/README.md cites, not computed.
#include "tools/rdma-probe/fingerprint.h"

#include <gtest/gtest.h>

#include "core/personality/file_loader.h"

#include <string>
#include <vector>

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;

const std::filesystem::path kShipped = RDMA_INTEROP_TEST_PERSONALITY_DIR;

std::vector<cm::Personality> shipped() {
  std::vector<std::string> problems;
  auto all = personality::list_personalities({kShipped}, &problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  return all;
}

cm::Personality load(const std::string& name) {
  auto p = personality::find_personality(name, {kShipped});
  EXPECT_TRUE(p.has_value()) << p.error();
  return *p;
}

TEST(ExpectedTraits, SiwProposesWriteEchoesAndClosesWhatItCannotTake) {
  const auto t = expected_traits(load("siw").mpa);
  EXPECT_EQ(t["revision"], 2);
  EXPECT_EQ(t["newer_revision"], "close");  // siw_proc_mpareq: version > 2, -EPROTO
  EXPECT_EQ(t["crc"], "optional");
  EXPECT_EQ(t["markers_refusal"], "rejected");  // a Reject for M
  EXPECT_EQ(t["peer_to_peer"], "accepted");
  EXPECT_EQ(t["rtr_send"], "write");  // Write named to a Send-only offer
  EXPECT_EQ(t["rtr_write"], "write");
  EXPECT_EQ(t["rtr_read"], "read");
  EXPECT_EQ(t["rtr_all"], "write");
  EXPECT_EQ(t["rtr_revision1"], "none");
  EXPECT_EQ(t["private_data_limit"], 256);
  EXPECT_EQ(t["oversize_refusal"], "closed");
  EXPECT_EQ(t["reserved_echoed"], true);
  EXPECT_EQ(t["reserved_rejected"], false);
  EXPECT_EQ(t["strict_ird_ord"], false);
}

TEST(ExpectedTraits, Cxgb4NamesItsOwnTypeAndWantsItInRevision1) {
  const auto t = expected_traits(load("cxgb4").mpa);
  EXPECT_EQ(t["newer_revision"], "reset");
  EXPECT_EQ(t["crc"], "want");
  EXPECT_EQ(t["markers_supported"], true);
  EXPECT_EQ(t["rtr_send"], "declined");  // p2p_type stays DISABLED: no P2P in the Reply
  EXPECT_EQ(t["rtr_write"], "read");     // its own p2p_type, not the Write it picked
  EXPECT_EQ(t["rtr_read"], "read");
  EXPECT_EQ(t["rtr_all"], "read");
  EXPECT_EQ(t["rtr_revision1"], "read");
  EXPECT_EQ(t["oversize_refusal"], "reset");
  const auto w = expected_traits(load("cxgb4-write").mpa);
  EXPECT_EQ(w["rtr_read"], "write");
  EXPECT_EQ(w["rtr_revision1"], "write");
}

TEST(ExpectedTraits, IrdmaRequiresPeerToPeerAndResets) {
  const auto t = expected_traits(load("irdma").mpa);
  EXPECT_EQ(t["peer_to_peer"], "required");
  EXPECT_EQ(t["peer_to_peer_refusal"], "reset");
  EXPECT_EQ(t["rtr_send"], "reset");  // -EOPNOTSUPP: no Reply, a reset
  EXPECT_EQ(t["rtr_write"], "write");
  EXPECT_EQ(t["rtr_all"], "read");  // Read first
  EXPECT_EQ(t["ird_ord_sentinel"], true);
  EXPECT_EQ(t["ird"], 127);
  EXPECT_EQ(t["ord"], 255);
  EXPECT_TRUE(t["oversize_refusal"].is_null());  // it takes 512
}

TEST(ExpectedTraits, QedrNamesEveryCommonType) {
  const auto t = expected_traits(load("qedr").mpa);
  EXPECT_EQ(t["rtr_send"], "send");
  EXPECT_EQ(t["rtr_all"], "send,write,read");
}

TEST(ExpectedTraits, ErdmaShowsNoPeerToPeerAndRefusesCrcAndMarkers) {
  const auto t = expected_traits(load("erdma").mpa);
  EXPECT_EQ(t["revision"], 129);
  EXPECT_FALSE(t.contains("peer_to_peer"));
  EXPECT_FALSE(t.contains("rtr_all"));
  EXPECT_FALSE(t.contains("rtr_revision1"));
  EXPECT_FALSE(t.contains("ird"));
  EXPECT_EQ(t["crc"], "refuse");
  EXPECT_EQ(t["crc_refusal"], "rejected");
  EXPECT_EQ(t["markers_refusal"], "rejected");
  EXPECT_EQ(t["oversize_refusal"], "closed");
  EXPECT_EQ(t["reserved_echoed"], true);
}

TEST(Fingerprint, EveryShippedPersonalityIsRecognisedAsItself) {
  const auto known = shipped();
  ASSERT_EQ(known.size(), 11u);
  for (const auto& p : known) {
    SCOPED_TRACE(p.name);
    const auto fp = fingerprint(expected_traits(p.mpa), known);
    ASSERT_FALSE(fp.behaves_like.empty()) << fp.summary;
    EXPECT_NE(std::find(fp.behaves_like.begin(), fp.behaves_like.end(), p.name),
              fp.behaves_like.end())
        << fp.summary;
    if (p.name == "cxgb4-rev1" || p.name == "freebsd-cxgbe") {
      // The same MPA; IRD/ORD 32 against 8 is not exchanged in revision 1.
      EXPECT_EQ(fp.verdict, "ambiguous");
      EXPECT_EQ(fp.behaves_like, (std::vector<std::string>{"cxgb4-rev1", "freebsd-cxgbe"}));
      EXPECT_NE(fp.summary.find("cxgb4-rev1 or freebsd-cxgbe"), std::string::npos) << fp.summary;
    } else {
      EXPECT_EQ(fp.verdict, "known") << fp.summary;
      EXPECT_EQ(fp.summary.rfind("behaves like " + p.name + " (", 0), 0u) << fp.summary;
    }
    EXPECT_EQ(fp.matches.front().score, 1.0);
  }
}

TEST(Fingerprint, SettingsDifferButDoNotDecide) {
  // Kernel siw under rping answers IRD and ORD 128: the application's, not siw's.
  auto observed = expected_traits(load("siw").mpa);
  observed["ird"] = 128;
  observed["ord"] = 128;
  const auto fp = fingerprint(observed, shipped());
  EXPECT_EQ(fp.verdict, "known");
  EXPECT_EQ(fp.closest, "siw");
  ASSERT_EQ(fp.matches.front().settings_differ.size(), 2u);
  EXPECT_EQ(fp.matches.front().settings_differ[0].trait, "ird");
  EXPECT_EQ(fp.matches.front().settings_differ[0].peer, 128);
  EXPECT_EQ(fp.matches.front().settings_differ[0].personality, 16);
  EXPECT_NE(fp.summary.find("settings differ: ird 128 (siw: 16)"), std::string::npos) << fp.summary;
}

TEST(Fingerprint, AStackNobodyDescribedIsUnknownWithItsClosestMatch) {
  // siw, but asking for markers and answering a Send-only offer with a Send RTR.
  cm::MpaPolicy made_up = load("siw").mpa;
  made_up.markers_wanted = true;
  made_up.markers_supported = true;
  made_up.rtr_offer = {.send = true, .write = true, .read = true};
  const auto fp = fingerprint(expected_traits(made_up), shipped());
  EXPECT_EQ(fp.verdict, "unknown");
  EXPECT_TRUE(fp.behaves_like.empty());
  EXPECT_EQ(fp.closest, "siw");
  EXPECT_EQ(fp.summary.rfind("unknown stack, closest: siw (", 0), 0u) << fp.summary;
  const auto& siw = fp.matches.front();
  std::vector<std::string> differs;
  for (const auto& d : siw.differs) differs.push_back(d.trait);
  // (markers_refusal: it refuses nothing, so it shows none: that decides nothing)
  EXPECT_EQ(differs, (std::vector<std::string>{"markers_wanted", "markers_supported", "rtr_send"}));
  EXPECT_LT(siw.score, 1.0);
}

TEST(Fingerprint, ATraitThePersonalityWouldNotShowIsADifference) {
  // A peer-to-peer answer from a peer compared with revision-1-only stacks.
  json observed = {{"revision", 1}, {"rtr_all", "read"}};
  const auto fp = fingerprint(observed, {load("rev1-only")});
  ASSERT_EQ(fp.matches.size(), 1u);
  EXPECT_EQ(fp.matches[0].compared, 2);
  EXPECT_EQ(fp.matches[0].matched, 1);
  ASSERT_EQ(fp.matches[0].differs.size(), 1u);
  EXPECT_TRUE(fp.matches[0].differs[0].personality.is_null());
}

TEST(Fingerprint, WhatThePeerDidNotShowDecidesNothingAndNoKnownStackSaysSo) {
  json observed = {{"revision", 2}, {"crc", "optional"}, {"rtr_all", nullptr}};
  const auto fp = fingerprint(observed, {load("siw"), load("never-rtr")});
  EXPECT_EQ(fp.verdict, "ambiguous");  // two traits cannot tell them apart
  EXPECT_EQ(fp.matches[0].compared, 2);
  EXPECT_EQ(fingerprint(observed, {}).summary,
            "unknown stack: no known personality to compare with");
}

TEST(Fingerprint, JsonCarriesTheVerdictAndEveryScore) {
  const auto fp = fingerprint(expected_traits(load("irdma").mpa), shipped());
  const auto j = to_json(fp);
  EXPECT_EQ(j["verdict"], "known");
  EXPECT_EQ(j["behaves_like"], json::array({"irdma"}));
  EXPECT_EQ(j["closest"], "irdma");
  ASSERT_EQ(j["matches"].size(), 11u);
  EXPECT_EQ(j["matches"][0]["name"], "irdma");
  EXPECT_EQ(j["matches"][0]["score"], 1.0);
  EXPECT_NE(j["matches"][0]["source"].get<std::string>().find("drivers/infiniband/hw/irdma/cm.c"),
            std::string::npos);
  for (const auto& m : j["matches"]) {
    EXPECT_EQ(m["differs"].size(),
              static_cast<std::size_t>(m["compared"].get<int>() - m["matched"].get<int>()));
  }
  std::ostringstream text;
  print_fingerprint(fp, text);
  EXPECT_NE(text.str().find("STACK\n  behaves like irdma"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace rdma_interop::probe
