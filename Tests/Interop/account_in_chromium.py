#!/usr/bin/env python3
"""The account page and the second factor in a real headless Chromium (Selenium + Debian's chromium-driver), as a
person uses them; the codes an authenticator app would show come from pyotp (PyPI), not from broker's code.

Usage: account_in_chromium.py enrol BROKER EMAIL SCREENSHOT_DIR PASSWORD_VARIABLE
       account_in_chromium.py lost BROKER EMAIL SCREENSHOT_DIR PASSWORD_VARIABLE
       account_in_chromium.py recover LINK SCREENSHOT_DIR PASSWORD_VARIABLE
The password is read from the environment variable PASSWORD_VARIABLE, never from argv.

enrol: signs in to BROKER/account with the password, adds an authenticator app on the page (the key read from the
page, the first code from pyotp), keeps the recovery codes it shows, signs out, signs in again with the password
and a recovery code, then with the password and a code 30 s ahead (a drifted phone clock inside the window), and
ends a second session from the page.
lost: the password, then "Lost the codes too?" on the code step, and the address typed into that form.
recover: opens the mailed LINK, types the password, and opens the account page.
Prints one JSON object of what each page said; writes screenshots at a phone's width and a desktop's.
"""
import json
import os
import sys
import time
import urllib.parse

import pyotp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

mode = sys.argv[1]
driver = chromium.start()
result = {}


def shoot(name):
    """The whole page, at a phone's width and a desktop's."""
    for label, width in (("phone", 390), ("desktop", 1280)):
        driver.set_window_size(width, 800)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, min(height + 120, 4000))
        driver.save_screenshot(os.path.join(shots, f"{name}-{label}.png"))
    driver.set_window_size(1280, 800)


def title():
    return driver.find_element(By.TAG_NAME, "h1").text


def text():
    return driver.find_element(By.TAG_NAME, "main").text


def fill(field, value):
    element = driver.find_element(By.ID, field)
    element.clear()
    element.send_keys(value)


def navigating(element):
    """Clicks `element` and waits for the next page to replace this one."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(old))


def press(label):
    """Clicks the button whose text is `label` (the first one), and waits for the page it leads to."""
    navigating(driver.find_element(By.XPATH, f"//button[normalize-space()='{label}']"))


def follow(text):
    navigating(driver.find_element(By.LINK_TEXT, text))


def sign_in(email, password):
    fill("email", email)
    fill("password", password)
    press("Sign in")


def code_step(code):
    fill("otp", code)
    press("Continue")


def enrol(broker, email, password):
    driver.get(broker + "/account")
    result["sign_in_title"] = title()
    sign_in(email, password)
    result["account_title"] = title()
    shoot("account-page")
    press("Add an authenticator app")
    result["enrolment_title"] = title()
    result["qr_code"] = len(driver.find_elements(By.CSS_SELECTOR, ".qr svg")) == 1
    shoot("account-totp-enrolment")
    link = driver.find_element(By.XPATH, "//a[starts-with(@href, 'otpauth://')]").get_attribute("href")
    secret = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["secret"][0]
    totp = pyotp.TOTP(secret)
    fill("code", totp.now())
    press("Turn on the second factor")
    result["codes_title"] = title()
    codes = [element.text for element in driver.find_elements(By.CSS_SELECTOR, "li.code")]
    result["recovery_codes"] = len(codes)
    shoot("account-recovery-codes")
    follow("Back to your account")
    result["after_enrolment"] = text()
    press("Sign out")

    # Signed out: the password, then a recovery code (the app's code of this step was spent confirming it).
    result["signed_out_title"] = title()
    sign_in(email, password)
    result["code_step_title"] = title()
    shoot("sign-in-second-factor")
    code_step(codes[0])
    result["after_recovery_code"] = text()
    press("Sign out")
    sign_in(email, password)
    code_step(codes[0])
    result["reused_recovery_code"] = driver.find_element(By.CSS_SELECTOR, ".problem").text
    # A phone whose clock runs 30 s ahead: inside the window, accepted.
    code_step(totp.at(time.time() + 30))
    result["after_drifted_code"] = text()
    shoot("account-page-two-factors")


def lost(broker, email, password):
    driver.get(broker + "/account")
    sign_in(email, password)
    follow("Remove the second factor through a link to your address")
    result["lost_title"] = title()
    fill("email", email)
    press("Mail me a link")
    result["lost_result"] = title()
    shoot("second-factor-lost")


def recover(link, password):
    driver.get(link)
    result["recover_title"] = title()
    shoot("second-factor-recover")
    fill("password", password)
    press("Remove the second factor")
    result["recover_result"] = title()
    broker = link.split("/auth/")[0]
    driver.get(broker + "/account")
    result["after_recovery_title"] = title()


try:
    if mode == "recover":
        shots = sys.argv[3]
        recover(sys.argv[2], os.environ[sys.argv[4]])
    else:
        shots = sys.argv[4]
        (enrol if mode == "enrol" else lost)(sys.argv[2], sys.argv[3], os.environ[sys.argv[5]])
    print(json.dumps(result))
except Exception as error:  # what the page showed, for the test's message
    result["error"] = repr(error)
    try:
        result["page"] = driver.find_element(By.TAG_NAME, "body").text[:2000]
    except Exception:
        pass
    print(json.dumps(result))
    sys.exit(1)
finally:
    driver.quit()
