#ifndef BROKER_CCURL_SHIM_H
#define BROKER_CCURL_SHIM_H

#include <curl/curl.h>

/* curl_easy_setopt and curl_easy_getinfo are variadic: Swift cannot call them.
   These typed wrappers are the only way BrokerHTTP reaches them. */

typedef size_t (*broker_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*broker_curl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

static inline CURLcode broker_curl_setopt_long(CURL *h, CURLoption opt, long value) {
    return curl_easy_setopt(h, opt, value);
}
static inline CURLcode broker_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value) {
    return curl_easy_setopt(h, opt, value);
}
static inline CURLcode broker_curl_setopt_string(CURL *h, CURLoption opt, const char *value) {
    return curl_easy_setopt(h, opt, value);
}
static inline CURLcode broker_curl_setopt_pointer(CURL *h, CURLoption opt, void *value) {
    return curl_easy_setopt(h, opt, value);
}
static inline CURLcode broker_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *value) {
    return curl_easy_setopt(h, opt, value);
}
static inline CURLcode broker_curl_setopt_data_cb(CURL *h, CURLoption opt, broker_curl_data_cb cb) {
    return curl_easy_setopt(h, opt, cb);
}
static inline CURLcode broker_curl_setopt_xferinfo_cb(CURL *h, broker_curl_xferinfo_cb cb) {
    return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb);
}
typedef curl_socket_t (*broker_curl_opensocket_cb)(void *clientp, curlsocktype purpose,
                                                   struct curl_sockaddr *address);
static inline CURLcode broker_curl_setopt_opensocket_cb(CURL *h, broker_curl_opensocket_cb cb) {
    return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, cb);
}
/* The address curl is about to connect to: curl keeps room for the whole sockaddr (IPv6 too) behind it. */
static inline const void *broker_curl_sockaddr_address(const struct curl_sockaddr *a) { return &a->addr; }
static inline curl_socket_t broker_curl_socket_bad(void) { return CURL_SOCKET_BAD; }

static inline CURLcode broker_curl_getinfo_long(CURL *h, CURLINFO info, long *out) {
    return curl_easy_getinfo(h, info, out);
}
static inline CURLcode broker_curl_getinfo_string(CURL *h, CURLINFO info, char **out) {
    return curl_easy_getinfo(h, info, out);
}

#endif
