/// The provider emulators `broker emulate` serves, one per provider of this build: `BrokerEmulators.all`, in
/// the order of `BrokerProviders.all` (written by the ProviderCatalog plugin from Package.swift's `providers`).
package enum BrokerEmulators {}
