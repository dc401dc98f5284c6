import Facebook
import Google
import MicrosoftAccount
package import ProviderSupport
import Twitter

/// The sign-in providers this build offers, in the order people see them. The executable hands this list to
/// the broker and the matching schemas (`BrokerProviderSchemas.all`, Schemas/) to its configuration; the
/// broker iterates them and names no provider itself. A new provider is one line here and one there (with its
/// folder under `Providers/`, its `Config/providers/<id>.json` and its two targets in Package.swift).
package enum BrokerProviders {
    package static let all: [ProviderDescriptor] = [
        Google.descriptor,
        Facebook.descriptor,
        MicrosoftAccount.descriptor,
        Twitter.descriptor,
    ]
}
