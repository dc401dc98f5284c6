// The messages and the transport protocol live in the leaf BrokerHTTPTypes (what provider modules and the
// configuration's side see without linking libcurl); whoever sends with libcurl sees them through this module.
@_exported public import BrokerHTTPTypes
