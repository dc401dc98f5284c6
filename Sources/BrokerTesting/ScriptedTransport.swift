package import BrokerCore
package import BrokerHTTP
import Synchronization

/// An ``HTTPTransport`` that answers from a script instead of the network, and records what was sent.
///
/// Each route is a method and an exact URL (query included); its answers are served in order and the last
/// one repeats. A request with no route fails as a refused connection would, naming what was asked.
package final class ScriptedTransport: HTTPTransport {
    package typealias Answer = @Sendable (HTTPClientRequest) throws -> HTTPClientResponse

    private struct Route {
        var answers: [Answer]
        var served = 0
    }

    private struct State {
        var routes: [String: Route] = [:]
        var sent: [HTTPClientRequest] = []
    }

    private let state = Mutex(State())

    package init() {}

    /// Adds answers for `method url`, served in order (the last repeats).
    package func on(_ method: String, _ url: String, _ answers: Answer...) {
        state.withLock { $0.routes["\(method) \(url)", default: Route(answers: [])].answers += answers }
    }

    /// Answers `method url` with a JSON document.
    package func onJSON(_ method: String, _ url: String, status: Int = 200, _ body: JSONValue) {
        on(method, url) { _ in Self.json(body, status: status) }
    }

    /// Every request sent so far, in order.
    package var sent: [HTTPClientRequest] { state.withLock { $0.sent } }

    /// How many requests went to `method url`.
    package func count(_ method: String, _ url: String) -> Int {
        state.withLock { $0.sent.filter { $0.method == method && $0.url == url }.count }
    }

    package func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        let answer: Answer? = state.withLock { state in
            state.sent.append(request)
            let key = "\(request.method) \(request.url)"
            guard var route = state.routes[key], !route.answers.isEmpty else { return nil }
            let answer = route.answers[min(route.served, route.answers.count - 1)]
            route.served += 1
            state.routes[key] = route
            return answer
        }
        guard let answer else {
            throw HTTPClientError(
                kind: .connectionFailed, message: "no scripted answer for \(request.method) \(request.url)")
        }
        return try answer(request)
    }

    /// A JSON response.
    package static func json(_ body: JSONValue, status: Int = 200) -> HTTPClientResponse {
        HTTPClientResponse(
            status: status, headers: [(name: "Content-Type", value: "application/json")],
            body: Array(body.serialized().utf8))
    }

    /// A failure of the transport itself (timeout, refused connection, …).
    package static func failure(_ kind: HTTPClientError.Kind, _ message: String) -> Answer {
        { _ in throw HTTPClientError(kind: kind, message: message) }
    }
}
