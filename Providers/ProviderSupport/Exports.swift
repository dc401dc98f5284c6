// A module builds from its schema's section types (ProviderSection, EndpointURL): whoever imports this module
// sees them.
@_exported public import ProviderSchemaSupport
