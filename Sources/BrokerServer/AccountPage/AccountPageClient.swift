import BrokerCore
import BrokerStore

/// The account page as a client of broker's own OpenID Provider: built in like the CLI (``CLIClient``),
/// first-party (no consent), its one redirect URI `/account`, its client id `broker-account` reserved. Its sign-in
/// goes through the same request and pages as an app's, with the same rules (the login throttle, the second
/// factor, passkeys, an essential `acr`), and ends in the broker's browser session instead of a code: the page
/// reads that session, as the sign-in of every app does.
enum AccountPageClient {
    static var clientID: String { AppRules.accountClientID }

    static func redirectURI(issuer: String) -> String { issuer + "/account" }

    static func record(issuer: String) -> AppRecord {
        AppRecord(
            clientID: clientID, secretHash: nil, redirectURIs: [redirectURI(issuer: issuer)], firstParty: true,
            createdAt: 0)
    }

    /// How the sign-in pages name a client: an app by its id, the account page in words.
    static func shown(_ app: AppRecord) -> String { app.clientID == clientID ? "your account page" : app.clientID }

    /// Back to the account page, saying `said` (a 303: it answers forms too).
    static func home(said: Said?) -> APIResponse {
        let location = "/account" + (said.map { "?said=" + $0.rawValue } ?? "")
        return APIResponse(
            status: 303, body: .object([:]), headers: [("Location", location), ("Cache-Control", "no-store")])
    }

    /// What the page says after a change, by name: the query carries the name only, never text, so that a link
    /// cannot make the page say anything else.
    enum Said: String, Sendable, CaseIterable {
        case signedIn = "signed-in"
        case signedInAgain = "signed-in-again"
        case signedOut = "signed-out"
        case sessionEnded = "session-ended"
        case browserEnded = "browser-ended"
        case appRevoked = "app-revoked"
        case linked
        case linkOwned = "link-owned"
        case linkTaken = "link-taken"
        case linkFailed = "link-failed"
        case unlinked
        case passwordAdded = "password-added"
        case lastWayIn = "last-way-in"
        case passkeyRemoved = "passkey-removed"
        case secondFactorAdded = "mfa-added"
        case secondFactorRemoved = "mfa-removed"
        case wrongCode = "wrong-code"
        case wrongPassword = "wrong-password"
        case notFound = "not-found"
        case notConfirmed = "not-confirmed"

        /// The sentence, and whether it reports a problem.
        var text: (String, problem: Bool) {
            switch self {
            case .signedIn: ("You are signed in.", false)
            case .signedInAgain: ("You signed in again: you can make the change now (for the next ten minutes).", false)
            case .signedOut: ("You are signed out of this browser.", false)
            case .sessionEnded: ("That session has ended: its tokens no longer refresh.", false)
            case .browserEnded: ("That browser is signed out, and the apps it signed in to with it.", false)
            case .appRevoked:
                ("The app no longer has your permission, and its sessions have ended. It asks again next time.", false)
            case .linked: ("The new way in is linked: you can sign in with it from now on.", false)
            case .linkOwned:
                (
                    "That account already signs in as another broker user. Sign in with it, delete that user or "
                        + "unlink it there, then link it here.", true
                )
            case .linkTaken: ("Another account of that provider is linked already: unlink it first.", true)
            case .linkFailed: ("The link did not complete: the sign-in there failed or took too long.", true)
            case .unlinked: ("Unlinked: the sessions signed in that way have ended.", false)
            case .passwordAdded:
                (
                    "The email and password are a way in now. If broker mails, confirm the address with the link "
                        + "it sent.", false
                )
            case .lastWayIn:
                ("That is your only way to sign in: add another before removing it, or delete the account.", true)
            case .passkeyRemoved: ("The passkey is removed.", false)
            case .secondFactorAdded: ("Your second factor is on: sign-ins with the password ask for a code.", false)
            case .secondFactorRemoved: ("The second factor and its recovery codes are removed.", false)
            case .wrongCode: ("Wrong or already used code: nothing was changed.", true)
            case .wrongPassword: ("Wrong password: nothing was changed.", true)
            case .notFound: ("That is no longer there (another page or device changed it).", true)
            case .notConfirmed: ("Type DELETE to confirm: nothing was changed.", true)
            }
        }
    }
}
