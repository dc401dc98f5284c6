package import BrokerCore
import BrokerHTTP
import Foundation
import HTTPTypes

/// One test client over both layers (issue 30): the in-process application (Hummingbird's router test client)
/// and a `broker serve` process (real HTTP on 127.0.0.1) answer the same calls, so an endpoint's checks are
/// written once (``EndpointContract``) and run on each — in BrokerServerTests in process, in
/// BrokerEndToEndTests against the binary.
package struct EndpointClient: Sendable {
    package typealias Exchange =
        @Sendable (
            _ method: String, _ path: String, _ headers: [(name: String, value: String)], _ body: [UInt8]?
        ) async throws -> EndpointReply

    /// Which layer answers ("in process", "process"), for messages.
    package let layer: String
    private let exchange: Exchange

    package init(layer: String, exchange: @escaping Exchange) {
        self.layer = layer
        self.exchange = exchange
    }

    /// The application in this process, through Hummingbird's test client.
    package static func inProcess(_ client: InProcessBroker.Client) -> EndpointClient {
        EndpointClient(layer: "in process") { method, path, headers, body in
            var fields = HTTPFields()
            for header in headers {
                guard let name = HTTPField.Name(header.name) else { throw ServerTestError("bad header \(header.name)") }
                fields.append(HTTPField(name: name, value: header.value))
            }
            let reply = try await client.send(HTTPRequest.Method(method) ?? .get, path, headers: fields, body: body)
            return EndpointReply(
                status: reply.status, headers: reply.headers.map { (name: $0.name.canonicalName, value: $0.value) },
                body: reply.body)
        }
    }

    /// A `broker serve` process, over HTTP.
    package static func process(_ server: BrokerProcess) -> EndpointClient {
        EndpointClient(layer: "process") { method, path, headers, body in
            let reply = try await server.send(
                HTTPClientRequest(method: method, url: server.url + path, headers: headers, body: body))
            return EndpointReply(status: reply.status, headers: reply.response.headers, body: reply.response.body)
        }
    }

    package func send(
        _ method: String, _ path: String, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil
    ) async throws -> EndpointReply {
        try await exchange(method, path, headers, body)
    }

    package func get(_ path: String, bearer: String? = nil) async throws -> EndpointReply {
        try await send("GET", path, headers: bearer.map { [(name: "Authorization", value: "Bearer \($0)")] } ?? [])
    }

    /// A POST with `body` as it is; `contentType` `nil` sends none.
    package func post(_ path: String, body: [UInt8], contentType: String?) async throws -> EndpointReply {
        try await send(
            "POST", path, headers: contentType.map { [(name: "Content-Type", value: $0)] } ?? [], body: body)
    }

    package func post(_ path: String, json: JSONValue) async throws -> EndpointReply {
        try await post(path, body: json.serializedBytes, contentType: "application/json")
    }

    package func form(_ path: String, _ fields: [(String, String)]) async throws -> EndpointReply {
        try await post(
            path, body: Array(FormEncoding.encode(fields).utf8), contentType: "application/x-www-form-urlencoded")
    }

    /// Registers an account, again while the hashing pool says it is busy (``retryingBusy(_:)``).
    package func register(_ email: String, _ password: String, name: String? = nil) async throws -> EndpointReply {
        var body: [String: JSONValue] = ["email": .string(email), "password": .string(password)]
        if let name { body["name"] = .string(name) }
        return try await retryingBusy { try await post("/auth/register", json: .object(body)) }
    }

    package func login(_ email: String, _ password: String) async throws -> EndpointReply {
        try await retryingBusy {
            try await post("/auth/login", json: ["email": .string(email), "password": .string(password)])
        }
    }
}

/// What either layer answered.
package struct EndpointReply: Sendable {
    package let status: Int
    package let headers: [(name: String, value: String)]
    package let body: [UInt8]
    package let json: JSONValue?

    package init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
        json = JSONValue.parse(body)
    }

    package subscript(key: String) -> JSONValue? { json?[key] }
    package var error: String? { json?["error"]?.stringValue }
    package var errorDescription: String { json?["error_description"]?.stringValue ?? "" }
    /// The first header named `name` (case-insensitive).
    package func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}
