// Writes patterns.json: JSON Schema patterns with strings and whether each matches, as
// ECMA-262 decides it (this engine's RegExp with the `u` flag: JSON Schema's regular
// expressions, matched on code points, unanchored). The structured-output tests hold the
// pattern automaton to these verdicts.
//
//   node tests/data/patterns/make_patterns.mjs > tests/data/patterns/patterns.json
//
// Each pattern has seed strings (some matching, some near); the candidates are the seeds,
// single-character mutations of them and random strings over an alphabet drawn from the
// pattern and the seeds. A seeded generator keeps the file the same from run to run.

const patterns = [
  ["^[a-z]+$", ["abc", "a", "", "aB", "abc1"]],
  ["abc", ["abc", "xxabcxx", "ab", "a\nbc\nabc"]],
  ["^abc", ["abc", "abcdef", "xabc"]],
  ["abc$", ["abc", "xxabc", "abcx"]],
  ["^$", ["", "a", "\n"]],
  ["", ["", "anything", "\n"]],
  ["^\\d{3}-\\d{4}$", ["555-1212", "55-1212", "5551212", "555-12123"]],
  ["^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", ["(888)555-1212", "555-1212", "(888)555-1212 ext. 532", "(800)FLOWERS"]],
  ["^[A-Z][a-z]*( [A-Z][a-z]*)*$", ["Ada Lovelace", "Ada", "ada", "Ada  Lovelace", "A B C"]],
  ["a|b$", ["a", "xb", "bx", "xax", "c"]],
  ["^a|b$", ["ax", "xb", "xa", "bx"]],
  ["^(?:foo|bar)+baz?$", ["foobarba", "foobaz", "ba", "foofoo", "barbazz"]],
  ["x{2,3}", ["xx", "axxxa", "x", "xax"]],
  ["^x{2,}$", ["xx", "xxxxxx", "x", "xxy"]],
  ["^x{0,2}y?$", ["", "x", "xxy", "xxx", "y", "yy"]],
  ["^x{3}$", ["xxx", "xx", "xxxx"]],
  [".", ["a", "", "\n", "\r\n", "\u2028", "\n\na"]],
  ["^.$", ["a", "é", "😀", "\n", "ab", "\u2029"]],
  ["^..$", ["ab", "😀😀", "a\n", "a"]],
  ["^[^a-c]+$", ["xyz", "xaz", "é😀", "\n", ""]],
  ["^[\\w.-]+@[\\w-]+\\.[a-z]{2,}$", ["a.b-c@d-e.org", "a@b.c", "@b.cd", "a@b.CD", "a b@c.de"]],
  ["^\\s*\\S+\\s*$", ["  x  ", "x", "x y", "\u00a0x\u3000", "\ufeffx", "\u200bx"]],
  ["^é+$", ["é", "éé", "e\u0301", "e"]],
  ["^[α-ω]{2}$", ["αω", "ΑΩ", "α", "λμν"]],
  ["^\\u{1F600}$", ["😀", "😁", "\u{1F600}\u{1F600}"]],
  ["^\\uD83D\\uDE00+$", ["😀", "😀😀", "😁"]],
  ["^[😀-😂]$", ["😀", "😁", "😂", "😃", "a"]],
  ["[\\d\\s]", ["a1", "a b", "ab", "\t"]],
  ["^\\x41\\u0042$", ["AB", "ab", "A"]],
  ["^\\t\\n\\v\\f\\r$", ["\t\n\v\f\r", "\t\n"]],
  ["^(a|ab)(c|bcd)(d*)$", ["abcd", "abcdd", "acd", "abbcd", "ab"]],
  ["^(?<year>\\d{4})-(?<month>\\d{2})$", ["2026-12", "26-12", "2026-1"]],
  ["^[^]$", ["a", "\n", "😀", "", "ab"]],
  ["^a*?b+?$", ["b", "aab", "abb", "a", ""]],
  ["^\\$\\d+(\\.\\d\\d)?$", ["$10", "$10.50", "$10.5", "10"]],
  ["^[a\\-z]+$", ["a-z", "b", "-"]],
  ["^[-a]$", ["-", "a", "b"]],
  ["^[a-]$", ["-", "a", "b"]],
  ["^\\cJ\\0$", ["\n\0", "\n"]],
  ["(?:)", ["", "x"]],
  ["^(a*)*$", ["", "aaa", "ab"]],
  ["^(a|b)*abb$", ["abb", "aababb", "ab", "abba"]],
  ["^.*$", ["", "abc", "a\nb", "a\rb", "é😀"]],
  ["^[\\s\\S]*$", ["", "a\nb", "\u2028"]],
  ["^\\D\\W\\S$", ["a!b", "1!b", "a_b", "a! "]],
  ["^[^\\d\\s]$", ["a", "1", " ", "é"]],
  ["^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\/\\\\$", [".*+?()[]{}|^$/\\", ".*+?"]],
  ["^[\\b]$", ["\b", "b"]],
  ["^\"[^\"\\\\]*\"$", ["\"quoted\"", "\"a\\\"", "\"\"", "noquote"]],
  ["^(\\d+|[a-f]+){2}$", ["12ab", "ab12", "1234", "abc", "g1"]],
  ["^([01]?\\d|2[0-3]):[0-5]\\d$", ["23:59", "7:05", "24:00", "12:60"]],
  ["^(?:\\d{1,3}\\.){3}\\d{1,3}$", ["192.168.0.1", "1.2.3", "1.2.3.4.5", "1234.1.1.1"]],
  ["^[A-Z]{2}-\\d{2,4}(?:-[a-z]+)?$", ["AB-123", "AB-12-x", "A-123", "AB-12345"]],
  ["colou?r", ["color", "colour", "colr", "my colours"]],
  ["^\\w+$", ["hello_1", "héllo", "a b"]],
  ["^[\\u0000-\\u001f]+$", ["\n\t", "\u0001", "a"]],
  ["^[^\\n]*\\n$", ["line\n", "line", "a\nb\n"]],
  ["\\{\\d+\\}", ["{12}", "x{3}y", "{}", "{a}"]],
  ["^a{1}b{0}c{0,0}$", ["a", "ab", "ac"]],
  ["^(?:ab|cd)*?$", ["", "abcd", "abc", "cdab"]],
];

// mulberry32
let seed = 20261205;
function random() {
  seed |= 0;
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (items) => items[Math.floor(random() * items.length)];

const out = [];
for (const [pattern, seeds] of patterns) {
  const re = new RegExp(pattern, "u");
  const alphabet = [...new Set([...[...pattern].filter((c) => !"\\^$".includes(c)), ...seeds.flatMap((s) => [...s]),
                                 "a", "Z", "0", "9", " ", "\n", "é", "😀", "-", "_"])];
  const candidates = new Set(seeds);
  for (let i = 0; i < 400; ++i) {
    const chars = [...pick(seeds)];
    const at = Math.floor(random() * (chars.length + 1));
    const kind = Math.floor(random() * 3);
    if (kind === 0) chars.splice(at, 0, pick(alphabet));
    else if (kind === 1 && chars.length > 0) chars.splice(Math.min(at, chars.length - 1), 1);
    else if (chars.length > 0) chars[Math.min(at, chars.length - 1)] = pick(alphabet);
    candidates.add(chars.join(""));
  }
  for (let i = 0; i < 1500; ++i) {
    const length = Math.floor(random() * 9);
    let s = "";
    for (let k = 0; k < length; ++k) s += pick(alphabet);
    candidates.add(s);
  }
  // Every seed, then up to 80 matching and 80 other strings.
  const yes = [], no = [];
  for (const s of candidates) (re.test(s) ? yes : no).push(s);
  const keep = new Set(seeds);
  for (const s of yes.slice(0, 80)) keep.add(s);
  for (const s of no.slice(0, 80)) keep.add(s);
  out.push({pattern, cases: [...keep].map((s) => [s, re.test(s)])});
}
process.stdout.write(JSON.stringify(out, null, 0).replace(/\},\{/g, "},\n{") + "\n");
