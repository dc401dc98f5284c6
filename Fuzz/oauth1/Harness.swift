import BrokerCore
import FuzzSupport
import ProviderSupport
import Twitter

/// X's OAuth 1.0a answers and headers. The first byte picks the reader:
/// 0 the form answers of `request_token` / `access_token`, 1 an `Authorization: OAuth …` header (the
/// emulator's side), 2 `verify_credentials`' JSON, 3 a URL's query and signature base string.
/// Properties: a header that parses renders to one that parses to the same parameters; an accepted identity
/// is a short all-digit id; a request token is never empty.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOAuth1(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let (mode, rest) = selector(fuzzInput(data, size))
    let text = String(decoding: rest, as: UTF8.self)
    switch mode % 4 {
    case 0:
        guard let answer = TwitterOAuth1Provider.formAnswer(status: 200, body: text) else { return 0 }
        if let (token, _) = try? TwitterOAuth1Provider.requestToken(answer) {
            require(!token.isEmpty, "an empty request token was accepted")
        }
        _ = try? TwitterOAuth1Provider.accessToken(answer)
    case 1:
        guard let parameters = OAuth1.parseAuthorization(text) else { return 0 }
        let again = OAuth1.parseAuthorization(OAuth1.authorizationHeader(parameters))
        require(again != nil, "a rendered header does not parse")
        if let again {
            require(
                again.count == parameters.count
                    && zip(again, parameters).allSatisfy {
                        $0.0.utf8.elementsEqual($1.0.utf8) && $0.1.utf8.elementsEqual($1.1.utf8)
                    },
                "a header's parameters changed in a round trip")
        }
    case 2:
        guard let me = JSONValue.parse(rest)?.objectValue else { return 0 }
        if let identity = try? TwitterOAuth1Provider.identity(me, access: ["user_id": "12345"]) {
            require(identity.subject == "12345", "an identity that is not the token's user was accepted")
        }
        if let identity = try? TwitterOAuth1Provider.identity(me, access: [:]) {
            require(
                identity.subject.utf8.count <= 32
                    && identity.subject.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") },
                "a non-numeric id was accepted")
        }
    default:
        _ = OAuth1.queryParameters(text)
        _ = OAuth1.signatureBaseString(method: "POST", url: text, parameters: [("oauth_nonce", "n")])
    }
    return 0
}
