#!/usr/bin/env python3
"""Plays the person on the other device of `broker login --device`, in a real headless Chromium (Selenium +
Debian's chromium-driver): opens the broker's /device page, types the code, signs in, and allows or denies.

Usage: device_in_chromium.py BROKER_URL USER_CODE WAY DECISION SCREENSHOT_DIR [EMAIL]
WAY: a provider of `broker emulate` — google, github, apple (whose answer is a form post its page submits, as
Apple's does), corp (Config/emulated.json's provider of type oidc) — through its consent page, first account;
or custom (EMAIL, and the password from the environment variable DEVICE_PASSWORD — never from argv).
DECISION: allow or deny.
The code is typed lower-case and without its hyphen, as people do. Prints one JSON object with each page's
title ({"entry", "choice", "asking", "confirm", "result", "result_text"}) and writes screenshots of each
broker page at a phone's width and a desktop's into SCREENSHOT_DIR (device-<page>-<phone|desktop>.png).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

broker, code, way, decision, shots = sys.argv[1:6]
driver = chromium.start()


def shoot(name):
    chromium.shoot(driver, shots, "device-" + name)


def title():
    return driver.find_element(By.TAG_NAME, "h1").text


def wait_for(xpath):
    """Waits for the page that has `xpath` (a click's navigation, a refresh, redirects) and returns the element."""
    return WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.XPATH, xpath) and d.find_element(By.XPATH, xpath))


result = {}
try:
    driver.get(broker + "/device")
    result["entry"] = title()
    shoot("entry")
    field = driver.find_element(By.ID, "user_code")
    field.send_keys(code.replace("-", "").lower())
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for("//*[@class='asking']")
    result["choice"] = title()
    result["asking"] = driver.find_element(By.CSS_SELECTOR, ".asking").text
    shoot("choice")
    if way != "custom":
        label = {"google": "Google", "github": "GitHub", "apple": "Apple", "corp": "Example Corp"}[way]
        driver.find_element(By.XPATH, f"//button[contains(., '{label}')]").click()
        wait_for("//*[@id='allow']").click()  # the emulator's consent page, first account
    else:
        driver.find_element(By.ID, "email").send_keys(sys.argv[6])
        driver.find_element(By.ID, "password").send_keys(os.environ["DEVICE_PASSWORD"])
        driver.find_element(By.XPATH, "//form[@action='/auth/device/password']//button").click()
    wait_for("//form[@action='/auth/device/decision']")
    result["confirm"] = title()
    result["confirm_text"] = driver.find_element(By.TAG_NAME, "main").text
    shoot("confirm")
    label = "Allow" if decision == "allow" else "Deny"
    driver.find_element(By.XPATH, f"//button[. = '{label}']").click()
    WebDriverWait(driver, 60).until(lambda d: not d.find_elements(By.XPATH, "//form[@action='/auth/device/decision']"))
    result["result"] = title()
    result["result_text"] = driver.find_element(By.TAG_NAME, "p").text
    shoot("result-" + decision)
except BaseException:
    # Where it stopped, for whoever reads the failure.
    print("stopped at %s: %s" % (driver.current_url, driver.find_element(By.TAG_NAME, "body").text[:500]),
          file=sys.stderr)
    raise
finally:
    driver.quit()
print(json.dumps(result))
