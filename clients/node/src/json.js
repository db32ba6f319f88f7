// JSON text for answers that may hold BigInt (64-bit integers from the wire), written
// as plain integers so the text is what the Python client's json.dumps would write;
// and the reverse, integers past Number's safe range read back as BigInt.

/** JSON.stringify, with BigInt values written as integers. */
export function stringify(value) {
  const marks = [];
  const text = JSON.stringify(value, (_key, item) => {
    if (typeof item !== "bigint") return item;
    marks.push(item.toString());
    return `\u0000bigint${marks.length - 1}\u0000`;
  });
  if (!marks.length) return text;
  return text.replace(/"\\u0000bigint(\d+)\\u0000"/g, (_, index) => marks[Number(index)]);
}

/** JSON.parse, with integers that a Number cannot hold exactly read as BigInt. */
export function parse(text) {
  const big = [];
  // Quote long integer literals outside strings, then turn the marks back into BigInt.
  const marked = text.replace(/"(?:[^"\\]|\\.)*"|(?<![\w.+-])-?\d{16,}(?![\w.])/g, (token) => {
    if (token.startsWith('"')) return token;
    const n = BigInt(token);
    if (n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER)) return token;
    big.push(n);
    return `"\\u0000bigint${big.length - 1}\\u0000"`; // JSON escapes: NUL in the parsed string
  });
  if (!big.length) return JSON.parse(text);
  return JSON.parse(marked, (_key, item) => {
    if (typeof item === "string" && item.startsWith("\u0000bigint")) return big[Number(item.slice(7, -1))];
    return item;
  });
}
