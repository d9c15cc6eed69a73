// The metrics library against values sacreBLEU 2.6.0 gives for the same inputs: the 13a
// tokenizer's corners, Python's whitespace and lowercasing, the score from statistics under each
// smoothing method, segment statistics with several references, the printed line, chrF.
#include "core/error.h"
#include "metrics/bleu.h"
#include "metrics/chrf.h"
#include "metrics/text.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace dscpp::metrics;
using Catch::Contains;

namespace {

BleuStats stats(int64_t hyp_len, int64_t ref_len, std::array<int64_t, 4> correct, std::array<int64_t, 4> total) {
  BleuStats s;
  s.hyp_len = hyp_len;
  s.ref_len = ref_len;
  s.correct = correct;
  s.total = total;
  return s;
}

BleuOptions smoothed(BleuSmooth smooth, std::optional<double> value = std::nullopt) {
  BleuOptions o;
  o.smooth = smooth;
  o.smooth_value = value;
  return o;
}

// Relative agreement to a few units in the last place: the same operations in the same order
// as sacreBLEU, so only exp() and log() may round differently from CPython's libm calls.
void check_close(double got, double want) {
  CHECK(got == Approx(want).epsilon(1e-14).margin(1e-300));
}

}  // namespace

TEST_CASE("13a: punctuation and symbols are split off, apostrophes stay", "[metrics]") {
  CHECK(tokenize_13a("Hello, world!") == "Hello , world !");
  CHECK(tokenize_13a("Don't (stop) [now] {ok} a/b a_b a~b a^b a`b a|b a@b a#b a%b a*b a+b a=b") ==
        "Don't ( stop ) [ now ] { ok } a / b a _ b a ~ b a ^ b a ` b a | b a @ b a # b a % b a * b a + b a = b");
  CHECK(tokenize_13a("  leading and trailing  ") == "leading and trailing");
  CHECK(tokenize_13a("") == "");
}

TEST_CASE("13a: periods and commas stay between digits only", "[metrics]") {
  CHECK(tokenize_13a("It costs $1,000.50 today.") == "It costs $ 1,000.50 today .");
  CHECK(tokenize_13a("1,000 people. 3.14 and .5 or 5. too") == "1,000 people . 3.14 and . 5 or 5 . too");
  // The second period of ".." follows a period that the first rule already consumed.
  CHECK(tokenize_13a("a..b ,, c.,d") == "a . . b , , c . , d");
  CHECK(tokenize_13a("caf\xC3\xA9. na\xC3\xAFve, 1.\xC3\xBC \xC3\xBC.1 \xC3\xBC,2") ==
        "caf\xC3\xA9 . na\xC3\xAFve , 1 . \xC3\xBC \xC3\xBC . 1 \xC3\xBC , 2");
}

TEST_CASE("13a: a dash is split off only after a digit", "[metrics]") {
  CHECK(tokenize_13a("pages 3-4, e-mail, --flag, 2--3") == "pages 3 - 4 , e-mail , --flag , 2 - -3");
}

TEST_CASE("13a: entities, <skipped>, hyphenated line breaks, newlines", "[metrics]") {
  CHECK(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt; &amp;lt; &apos;") == "\" Hi \" & < b > < & apos ;");
  CHECK(tokenize_13a("before<skipped>after") == "beforeafter");
  CHECK(tokenize_13a("hyphen-\nated line\nbreak") == "hyphenated line break");
  CHECK(tokenize_13a("x-\n") == "x");
}

TEST_CASE("13a: text beyond ASCII passes whole; Python's whitespace separates", "[metrics]") {
  const std::string unicode = "\xC3\x9Cn\xC3\xAF \xC2\xABq\xC2\xBB \xE2\x80\x94 d\xE2\x80\xA6 \xE6\x97\xA5\xE3\x80\x82";
  CHECK(tokenize_13a(unicode) == unicode);
  // Tab, no-break space, em space, ideographic space and NEL separate; the zero-width space does not.
  CHECK(tokenize_13a("tab\there\u00A0nbsp\u2003em\u3000ideo\u0085nel\u200Bzwsp") ==
        "tab here nbsp em ideo nel\u200Bzwsp");
}

TEST_CASE("Python's str methods", "[metrics]") {
  CHECK(split_py("\u001Ca\u001F b\u00A0") == std::vector<std::string_view>{"a", "b"});
  CHECK(rstrip_py("a b \t\xE3\x80\x80") == "a b");
  CHECK(rstrip_py("\xE2\x80\x8B") == "\xE2\x80\x8B");
  CHECK(code_point_count("\xC3\xA9t\xC3\xA9") == 3);
  CHECK(invalid_utf8_at("ok\xC3") == 2);
  CHECK(invalid_utf8_at("\xED\xA0\x80") == 0);  // a surrogate
  CHECK(invalid_utf8_at("\xF0\x9F\x98\x80") == std::string_view::npos);
  // Final sigma, the dotted capital I's two code points, ß unchanged, titlecase digraphs.
  CHECK(lower_py("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3.") ==
        "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82 \xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82.");
  CHECK(lower_py("\xC4\xB0stanbul") == "i\xCC\x87stanbul");
  CHECK(lower_py("STRASSE Straße") == "strasse straße");
  CHECK(lower_py("\xC7\x85 \xC7\x88") == "\xC7\x86 \xC7\x89");
  CHECK(lower_py("\xCE\xA3\xCE\x91 \xCE\xA3") == "\xCF\x83\xCE\xB1 \xCF\x83");
  CHECK(lower_py("A\xCD\x85\xCE\xA3") == "a\xCD\x85\xCF\x82");  // a case-ignorable mark in between
}

TEST_CASE("BLEU from statistics under each smoothing method", "[metrics]") {
  const BleuStats s = stats(12, 14, {10, 5, 2, 0}, {12, 11, 10, 9});
  BleuScore r = compute_bleu(s, smoothed(BleuSmooth::kExp));
  check_close(r.score, 21.560358468347392);
  check_close(r.bp, 0.846481724890614);
  check_close(r.precisions[3], 5.555555555555555);
  CHECK(r.format() == "BLEU = 21.56 83.3/45.5/20.0/5.6 (BP = 0.846 ratio = 0.857 hyp_len = 12 ref_len = 14)");
  CHECK(r.format(2, true) == "21.56");
  CHECK(r.format(1, true) == "21.6");

  r = compute_bleu(s, smoothed(BleuSmooth::kNone));
  CHECK(r.score == 0.0);
  CHECK(r.format() == "BLEU = 0.00 83.3/45.5/20.0/0.0 (BP = 0.846 ratio = 0.857 hyp_len = 12 ref_len = 14)");
  r = compute_bleu(s, smoothed(BleuSmooth::kFloor));
  check_close(r.score, 14.41828069752362);
  check_close(r.precisions[3], 1.1111111111111112);
  r = compute_bleu(s, smoothed(BleuSmooth::kAddK));
  check_close(r.score, 27.637383080309565);
  CHECK(r.format() == "BLEU = 27.64 83.3/50.0/27.3/10.0 (BP = 0.846 ratio = 0.857 hyp_len = 12 ref_len = 14)");
  CHECK(r.counts == std::array<int64_t, 4>{10, 5, 2, 0});  // the counts themselves, not smoothed

  const BleuStats two_zeros = stats(12, 14, {10, 5, 0, 0}, {12, 11, 10, 9});
  check_close(compute_bleu(two_zeros, smoothed(BleuSmooth::kFloor, 0.25)).score, 10.780179234173694);
  check_close(compute_bleu(two_zeros, smoothed(BleuSmooth::kAddK, 0.5)).score, 15.048571054130559);
  BleuOptions eff;
  eff.effective_order = true;
  check_close(compute_bleu(two_zeros, eff).score, 12.819865846283943);
}

TEST_CASE("BLEU corners: short hypotheses, no matches, no words, longer than the reference", "[metrics]") {
  const BleuStats short_hyp = stats(3, 3, {3, 1, 0, 0}, {3, 2, 1, 0});
  BleuOptions eff = smoothed(BleuSmooth::kNone);
  eff.effective_order = true;
  CHECK(compute_bleu(short_hyp, eff).format() ==
        "BLEU = 0.00 100.0/50.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)");
  // add-k turns the empty 4-gram order into k/k.
  const BleuScore addk = compute_bleu(short_hyp, smoothed(BleuSmooth::kAddK));
  check_close(addk.score, 75.98356856515933);
  CHECK(addk.format() == "BLEU = 75.98 100.0/66.7/50.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)");
  CHECK(compute_bleu(stats(3, 5, {0, 0, 0, 0}, {3, 2, 1, 0}), {}).format() ==
        "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.513 ratio = 0.600 hyp_len = 3 ref_len = 5)");
  CHECK(compute_bleu(stats(0, 5, {}, {}), {}).format() ==
        "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 5)");
  CHECK(compute_bleu(stats(0, 0, {}, {}), {}).format() ==
        "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)");
  const BleuScore longer = compute_bleu(stats(5, 4, {5, 3, 2, 1}, {5, 4, 3, 2}), {});
  check_close(longer.score, 70.71067811865478);
  CHECK(longer.format() == "BLEU = 70.71 100.0/75.0/66.7/50.0 (BP = 1.000 ratio = 1.250 hyp_len = 5 ref_len = 4)");
}

TEST_CASE("segment statistics: clipping by the highest reference count, the closest length", "[metrics]") {
  const BleuOptions o;
  auto flat = [&](std::string_view hyp, std::vector<std::string_view> refs) {
    return bleu_segment_stats(hyp, refs, o).flat();
  };
  // "the" three times, at most twice in one reference: clipped to 2; + "cat" = 3 unigram matches.
  CHECK(flat("the the the cat", {"the cat sat", "a the cat the"}) ==
        std::array<int64_t, 10>{4, 4, 3, 1, 0, 0, 4, 3, 2, 1});
  // Lengths 3 and 7 are both 2 from 5: the shorter wins.
  CHECK(flat("a b c d e", {"a b c", "a b c d e f g"}) == std::array<int64_t, 10>{5, 3, 5, 4, 3, 2, 5, 4, 3, 2});
  CHECK(flat("a b c d", {"a b c", "a b c d e"}) == std::array<int64_t, 10>{4, 3, 4, 3, 2, 1, 4, 3, 2, 1});
  CHECK_THROWS_WITH(bleu_segment_stats("a", {}, o), Contains("at least one reference"));
}

TEST_CASE("statistics add up and round-trip through their flat form", "[metrics]") {
  Bleu bleu;
  bleu.add("The cat sat on the mat.", {"The cat is on the mat."});
  CHECK(bleu.score().format() == "BLEU = 48.89 85.7/66.7/40.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)");
  BleuStats twice = bleu.stats();
  twice += bleu.stats();
  CHECK(BleuStats::from_flat(twice.flat()).flat() == twice.flat());
  CHECK(twice.hyp_len == 14);
  Bleu summed;
  summed.add_stats(twice);
  CHECK(summed.score().score == Approx(bleu.score().score).epsilon(1e-15));

  BleuOptions lower;
  lower.lowercase = true;
  CHECK(corpus_bleu({"THE CAT SAT ON THE MAT."}, {{"The cat is on the mat."}}, lower).format() ==
        "BLEU = 48.89 85.7/66.7/40.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)");
  CHECK_THROWS_WITH(corpus_bleu({"a", "b"}, {{"a"}}), Contains("2 hypotheses but reference stream 1 has 1"));
}

TEST_CASE("option names", "[metrics]") {
  CHECK(parse_bleu_smooth("add-k") == BleuSmooth::kAddK);
  CHECK(bleu_smooth_name(BleuSmooth::kFloor) == "floor");
  CHECK(parse_bleu_tokenizer("none") == BleuTokenizer::kNone);
  CHECK_THROWS_WITH(parse_bleu_smooth("add_k"), Contains("expected exp, none, floor or add-k"));
  CHECK_THROWS_WITH(parse_bleu_tokenizer("intl"), Contains("expected 13a or none"));
  BleuOptions none;
  none.tokenizer = BleuTokenizer::kNone;
  CHECK(bleu_preprocess("a,b  c. ", none) == "a,b  c.");
}

TEST_CASE("chrF and chrF++", "[metrics]") {
  Chrf chrf;
  chrf.add("The cat sat on the mat.", {"The cat is on the mat."});
  check_close(chrf.score().score, 67.17273492330233);
  CHECK(chrf.score().format() == "chrF2 = 67.17");
  ChrfOptions pp;
  pp.word_order = 2;
  Chrf chrf_pp(pp);
  chrf_pp.add("The cat sat on the mat.", {"The cat is on the mat."});
  check_close(chrf_pp.score().score, 69.43695278069349);
  CHECK(chrf_pp.score().format() == "chrF2++ = 69.44");
  CHECK_THROWS_WITH(chrf.add_stats(ChrfStats(3, 0)), Contains("3 statistics added to 18"));
}
