import BrokerCore
import BrokerStore
import Logging

/// `GET /healthz`: 200 while the store answers, 503 while it does not.
struct HealthCheck: Sendable {
    let store: any Store
    let logger: Logger

    func check() async -> APIResponse {
        do {
            try await store.ping()
            return APIResponse(status: 200, body: .object(["status": "ok"]))
        } catch {
            logger.error("health check: the store does not answer", metadata: ["error": "\(error)"])
            return APIResponse(status: 503, body: .object(["status": "unavailable", "error": "server_error"]))
        }
    }
}
