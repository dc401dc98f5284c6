/// The settings and the credential store live in BrokerCredentials (no libcurl, no Foundation) so that the
/// `broker` launcher can share them; everyone else gets them through this module.
@_exported public import BrokerCredentials
