import Facebook
import Google
import MicrosoftAccount
package import ProviderSupport
import Twitter

/// The sign-in providers this build offers, in the order people see them. The executable hands this list to
/// the broker, which iterates it and names no provider itself. A new provider is one line here (with its
/// folder under `Providers/`, its `Config/providers/<id>.json` and its target in Package.swift).
package enum BrokerProviders {
    package static let all: [ProviderDescriptor] = [
        Google.descriptor,
        Facebook.descriptor,
        MicrosoftAccount.descriptor,
        Twitter.descriptor,
    ]
}
