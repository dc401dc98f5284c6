#ifndef BROKER_COPENSSL_SHIM_H
#define BROKER_COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

/* An HMAC context keyed once with `digest` (a name: "SHA256"), for EVP_MAC_CTX_dup per message: EVP_Q_mac fetches
   the MAC and its digest by name at every call. NULL on failure. */
static inline EVP_MAC_CTX *broker_hmac_keyed(const char *digest, const unsigned char *key, size_t key_length) {
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) return NULL;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);
    if (ctx == NULL) return NULL;
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0);
    params[1] = OSSL_PARAM_construct_end();
    /* A zero-length key must still be a valid pointer for OpenSSL. */
    static const unsigned char empty[1] = {0};
    if (EVP_MAC_init(ctx, key_length > 0 ? key : empty, key_length, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* A PEM password callback that refuses: without it OpenSSL would prompt on the terminal
   for an encrypted key, which a server or a CI job must never do. */
static inline int broker_pem_no_password(char *buf, int size, int rwflag, void *u) {
    (void)buf; (void)size; (void)rwflag; (void)u;
    return -1;
}

static inline EVP_PKEY *broker_pem_read_private_key(BIO *bio) {
    return PEM_read_bio_PrivateKey(bio, NULL, broker_pem_no_password, NULL);
}

static inline EVP_PKEY *broker_pem_read_public_key(BIO *bio) {
    return PEM_read_bio_PUBKEY(bio, NULL, broker_pem_no_password, NULL);
}

/* BIO_get_mem_data is a macro over BIO_ctrl. */
static inline long broker_bio_mem_data(BIO *bio, char **out) {
    return BIO_get_mem_data(bio, out);
}

/* Selection flags for EVP_PKEY_fromdata are macro expressions; expose them as values. */
static inline int broker_selection_keypair(void) { return EVP_PKEY_KEYPAIR; }
static inline int broker_selection_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }

#endif
