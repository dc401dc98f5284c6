import BrokerCore
import Hummingbird

/// The account page: `GET /account`, and its forms under `/auth/account/page/` (where the forms' CSRF cookie,
/// `Path=/auth`, is sent).
struct AccountPageRoutes {
    let page: AccountPageService

    func collection() -> RouteCollection<BrokerRequestContext> {
        typealias Server = BrokerHTTPServer
        let routes = RouteCollection(context: BrokerRequestContext.self)
        routes.get("/account") { request, _ in
            try await Server.response(
                page.page(query: try Server.query(request), cookie: request.headers.value(.cookie)))
        }
        routes.post("/auth/account/page/:action") { request, context in
            try await Server.response(
                page.act(
                    context.parameters.get("action") ?? "", Server.input(request, allowForm: true),
                    cookie: request.headers.value(.cookie), address: context.clientAddress))
        }
        return routes
    }
}
