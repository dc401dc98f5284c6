/// The sign-in providers this build offers, in the order people see them: `BrokerProviders.all`, a list of
/// `ProviderDescriptor`s the ProviderCatalog plugin writes from this target's dependencies (Package.swift's
/// `providers`). The executable hands it to the broker and the matching schemas (`BrokerProviderSchemas.all`) to
/// its configuration; the broker iterates them and names no provider itself.
package enum BrokerProviders {}
