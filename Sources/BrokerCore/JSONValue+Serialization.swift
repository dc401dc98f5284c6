extension JSONValue {
    /// Compact JSON with object members in lexicographic (UTF-16 code unit) order and `/` unescaped.
    ///
    /// Deterministic output keeps signed tokens and fixtures stable from run to run.
    package func serialized() -> String {
        String(decoding: serializedBytes, as: UTF8.self)
    }

    /// The same document as UTF-8 bytes, written byte by byte: escapes only ever apply to ASCII, so the
    /// UTF-8 of a string is copied through and only `"`, `\\` and control bytes are rewritten.
    package var serializedBytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): JSONValue.writeInteger(value, into: &out)
        case .double(let value):
            if value.isFinite {
                if value.rounded(.towardZero) == value, abs(value) < 1e15 {
                    JSONValue.writeInteger(Int64(value), into: &out)
                } else {
                    out.append(contentsOf: "\(value)".utf8)
                }
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let value): JSONValue.writeString(value, into: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // The members are put in order through their ranks (`sortRank`): integers, so the sort neither copies
            // members nor compares strings, unless two keys share their first eight bytes. Sorting the members
            // themselves by `utf16Precedes` was ~22,000 instructions of a mint (its claims, its header and its
            // answer) under callgrind, most of it copying keys and values in and out of the array.
            // The members are found again by their dictionary indices, and only the keys are read to order them:
            // copying the members into an array first (and releasing it after) was ~4,000 instructions of a mint's
            // claims and answer.
            typealias Place = (rank: UInt64, index: [String: JSONValue].Index)
            withUnsafeTemporaryAllocation(of: Place.self, capacity: members.count) { buffer in
                var order = buffer
                var slot = 0
                var index = members.startIndex
                while index != members.endIndex {
                    order.initializeElement(at: slot, to: (JSONValue.sortRank(members.keys[index]), index))
                    slot += 1
                    members.formIndex(after: &index)
                }
                order.sort { a, b in
                    a.rank != b.rank
                        ? a.rank < b.rank : JSONValue.utf16Precedes(members.keys[a.index], members.keys[b.index])
                }
                for position in 0..<slot {
                    if position > 0 { out.append(UInt8(ascii: ",")) }
                    let member = members[order[position].index]
                    JSONValue.writeString(member.key, into: &out)
                    out.append(UInt8(ascii: ":"))
                    member.value.write(into: &out)
                }
                _ = order.deinitialize()
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Whether `a` sorts before `b` in UTF-16 code unit order (the order of JWS and RFC 7638 examples), read
    /// from the strings' UTF-8 without walking their UTF-16 views.
    ///
    /// UTF-8 byte order is code point order, and so is UTF-16's except for one pair of ranges: a character
    /// above U+FFFF (UTF-8 lead byte F0–F4) is a surrogate pair from 0xD800 in UTF-16, so it sorts before
    /// U+E000–U+FFFF (lead bytes EE, EF). Up to the first differing byte both strings hold the same
    /// characters, so that byte is either a lead byte of both or a continuation byte of two characters with
    /// the same lead byte, whose orders agree.
    package static func utf16Precedes(_ a: String, _ b: String) -> Bool {
        var a = a
        var b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let common = min(x.count, y.count)
                var index = 0
                while index < common, x[index] == y[index] { index += 1 }
                guard index < common else { return x.count < y.count }
                let p = x[index]
                let q = y[index]
                if p >= 0xF0, q == 0xEE || q == 0xEF { return true }
                if q >= 0xF0, p == 0xEE || p == 0xEF { return false }
                return p < q
            }
        }
    }

    /// An integer's decimal digits, written straight into `out` (`String(value)` made a string of each, 19 times
    /// in a mint's claims and answer).
    private static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        // At most 20 digits (UInt64.max); written from the last, then copied in order.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start..<20]))
        }
    }

    /// A key's first eight UTF-8 bytes as one big-endian number (zeros after a shorter key), its lead bytes
    /// renumbered so that the numbers' order is ``utf16Precedes``' order wherever two ranks differ; equal ranks
    /// (keys that share those eight bytes) say nothing, and the keys themselves are compared.
    ///
    /// Why differing ranks decide: up to the first differing byte both keys hold the same characters, so that byte
    /// is a lead byte in both, a continuation byte in both, or a lead byte against the end of the shorter key
    /// (zero, below every byte a character's encoding can start with but NUL — and a NUL there makes the ranks
    /// equal). Lead bytes F0–F4 (above U+FFFF: surrogate pairs from 0xD800 in UTF-16) take the places EE–F2 and
    /// EE, EF (U+E000–U+FFFF) move to F3, F4, so they sort as in UTF-16; no other byte moves.
    package static func sortRank(_ key: String) -> UInt64 {
        var key = key
        return key.withUTF8 { bytes in
            var rank: UInt64 = 0
            let count = min(bytes.count, 8)
            for index in 0..<count {
                let byte = bytes[index]
                let ordered: UInt8
                switch byte {
                case 0xF0...0xF4: ordered = byte - 2
                case 0xEE, 0xEF: ordered = byte + 5
                default: ordered = byte
                }
                rank = rank << 8 | UInt64(ordered)
            }
            // `<<` by 64 or more is zero: the empty key ranks 0.
            return rank << (8 * (8 - count))
        }
    }

    private static func writeString(_ value: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Runs of bytes that need no escape (nearly every byte of a token's claims) are copied whole.
            var start = 0
            while start < bytes.count {
                let index = firstToEscape(bytes, from: start)
                if start < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
                guard index < bytes.count else { break }
                escape(bytes[index], into: &out)
                start = index + 1
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Whether JSON must escape `byte`: a quote, a backslash or a control character.
    private static func mustEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// The index of the first byte from `start` on that JSON must escape, or `bytes.count`: where the writer
    /// stops copying, and where the parser's plain run of a string ends (its quote, an escape, or a control
    /// byte it refuses).
    ///
    /// Eight bytes are looked at in one step (a mint's answer carries a ~600-byte access token, its claims
    /// another ~300 bytes, and each byte alone took three comparisons and a branch): a word has a byte below
    /// 0x20 exactly when `(w - 0x20…20) & ~w & 0x80…80` is not zero (every byte's borrow lands in its own top
    /// bit, and bytes of 0x80 and above, UTF-8's, keep theirs clear through `~w`), and a byte equal to `c` is a
    /// zero byte of `w ^ c…c`, which is the same test below 0x01.
    static func firstToEscape(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        if let base = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let tops: UInt64 = 0x8080_8080_8080_8080
            while index + 8 <= bytes.count {
                let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                let quotes = word ^ (ones &* 0x22)
                let backslashes = word ^ (ones &* 0x5C)
                let controls = (word &- ones &* 0x20) & ~word
                let found = (controls | ((quotes &- ones) & ~quotes) | ((backslashes &- ones) & ~backslashes)) & tops
                if found != 0 { break }
                index += 8
            }
        }
        while index < bytes.count, !mustEscape(bytes[index]) { index += 1 }
        return index
    }

    /// The escape of a quote, a backslash or a control character.
    private static func escape(_ byte: UInt8, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(UInt8(ascii: "u"))
            out.append(UInt8(ascii: "0"))
            out.append(UInt8(ascii: "0"))
            out.append(hexDigits[Int(byte >> 4)])
            out.append(hexDigits[Int(byte & 0x0F)])
        }
    }

    /// Parses a JSON document strictly (see ``JSONParser``); `nil` when it is not valid JSON.
    package static func parse<Bytes: Collection>(_ bytes: Bytes) -> JSONValue? where Bytes.Element == UInt8 {
        JSONParser.parse(Array(bytes))
    }

    /// Parses a JSON document strictly, saying where and why it is not valid JSON.
    package static func parseReportingError<Bytes: Collection>(
        _ bytes: Bytes
    ) -> Result<JSONValue, JSONSyntaxError> where Bytes.Element == UInt8 {
        JSONParser.parseReportingError(Array(bytes))
    }
}
