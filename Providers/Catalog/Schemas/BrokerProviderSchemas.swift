import FacebookSchema
import GoogleSchema
import MicrosoftAccountSchema
package import ProviderSchemaSupport
import TwitterSchema

/// What each provider this build offers accepts in its configuration section, in the order of
/// `BrokerProviders.all` (a test holds the two lists to each other). The configuration loader and its fuzz
/// harness take this list: checking a section needs neither the modules nor the HTTP stack and cryptography
/// they link.
package enum BrokerProviderSchemas {
    package static let all: [ProviderSchema] = [
        GoogleSchema.schema,
        FacebookSchema.schema,
        MicrosoftAccountSchema.schema,
        TwitterSchema.schema,
    ]
}
