import BrokerTesting
import Foundation
import Glibc

/// One HTTP/1.1 connection to 127.0.0.1 written byte for byte: requests sent together in one write
/// (pipelined), answers read back in the order they come, on a non-blocking socket polled by ``eventually``
/// (no thread of Swift's pool waits on it).
package final class RawHTTPConnection {
    package struct Answer: Sendable, CustomStringConvertible {
        package let statusLine: String
        package let status: Int
        /// Header fields in the order sent; names as sent.
        package let headers: [(name: String, value: String)]
        package let body: [UInt8]

        /// The values of field `name` (case-insensitive).
        package func values(_ name: String) -> [String] {
            headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
        }
        package func header(_ name: String) -> String? { values(name).first }
        package var description: String { "\(status) \(headers) \(String(decoding: body, as: UTF8.self))" }
    }

    private let descriptor: Int32
    private var received: [UInt8] = []
    private var peerClosed = false

    package init(port: Int) throws {
        descriptor = try connectWithoutWaiting(port: port)
    }

    deinit { close(descriptor) }

    /// Sends `text` (requests, `\r\n` line ends included) once the connection is up.
    package func send(_ text: String) async throws {
        var rest = Array(text.utf8)[...]
        let sent = try await eventually {
            let count = rest.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count > 0 { rest = rest.dropFirst(count) }
            return rest.isEmpty
        }
        guard sent else { throw ServerTestError("could not send the requests") }
    }

    /// The next `count` answers, in order.
    package func answers(_ count: Int) async throws -> [Answer] {
        var answers: [Answer] = []
        let complete = try await eventually(every: .milliseconds(5)) {
            while answers.count < count, let answer = try takeAnswer() { answers.append(answer) }
            if answers.count == count { return true }
            readAvailable()
            while answers.count < count, let answer = try takeAnswer() { answers.append(answer) }
            return answers.count == count || peerClosed
        }
        guard complete, answers.count == count else {
            throw ServerTestError("\(answers.count) of \(count) answers: \(answers)")
        }
        return answers
    }

    /// Whether the server closes the connection (with nothing more to read) within the polling bound.
    package func closedByServer() async throws -> Bool {
        try await eventually {
            readAvailable()
            return peerClosed && received.isEmpty
        }
    }

    private func readAvailable() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                received += buffer.prefix(count)
            } else {
                if count == 0 { peerClosed = true }
                return
            }
        }
    }

    private func takeAnswer() throws -> Answer? { try Self.takeAnswer(from: &received) }

    /// One whole answer off the front of `bytes` (`Content-Length` bodies only), if it is all there.
    package static func takeAnswer(from bytes: inout [UInt8]) throws -> Answer? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = bytes.firstRange(of: separator) else { return nil }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst()
        guard statusLine.hasPrefix("HTTP/1.1 "), let status = Int(statusLine.dropFirst(9).prefix(3)) else {
            throw ServerTestError("not an HTTP/1.1 status line: \(statusLine)")
        }
        let headers = lines.map { line -> (name: String, value: String) in
            let colon = line.firstIndex(of: ":") ?? line.endIndex
            return (
                String(line[..<colon]),
                String(line[colon...].dropFirst()).trimmingCharacters(in: .whitespaces)
            )
        }
        let length = headers.first { $0.name.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? 0
        guard bytes.count >= end.upperBound + length else { return nil }
        let body = Array(bytes[end.upperBound..<end.upperBound + length])
        bytes.removeFirst(end.upperBound + length)
        return Answer(statusLine: statusLine, status: status, headers: headers, body: body)
    }
}
