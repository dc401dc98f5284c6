/// What each provider this build offers accepts in its configuration section: `BrokerProviderSchemas.all`, in
/// the order of `BrokerProviders.all` (both written by the ProviderCatalog plugin from Package.swift's
/// `providers`). The configuration loader and its fuzz harness take this list: checking a section needs neither
/// the modules nor the HTTP stack and cryptography they link.
package enum BrokerProviderSchemas {}
