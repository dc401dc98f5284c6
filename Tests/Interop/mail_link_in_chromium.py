#!/usr/bin/env python3
"""Follows a link from the broker's mail in a real headless Chromium (Selenium + Debian's chromium-driver) and
uses the page as a person would.

Usage: mail_link_in_chromium.py reset LINK SCREENSHOT_DIR PASSWORD_VARIABLE
       mail_link_in_chromium.py verify LINK SCREENSHOT_DIR
reset: first two passwords that differ (the page must say so and keep the form), then the new password — read
from the environment variable PASSWORD_VARIABLE, never from argv — twice. verify: presses the button.
Prints one JSON object ({"form_title", "mismatch_problem", "result_title", "result_text"} for reset,
{"page_title", "result_title"} for verify) and writes screenshots of each page at a phone's width and a
desktop's into SCREENSHOT_DIR.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

mode, link, shots = sys.argv[1], sys.argv[2], sys.argv[3]
driver = chromium.start()


def shoot(name):
    chromium.shoot(driver, shots, name)


def title():
    return driver.find_element(By.TAG_NAME, "h1").text


def submit():
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def reset(password):
    def fill(first, second):
        for field, text in (("password", first), ("password_again", second)):
            driver.find_element(By.ID, field).clear()
            driver.find_element(By.ID, field).send_keys(text)
        submit()

    result = {"form_title": title()}
    shoot("reset-form")
    fill(password, password + " but different")
    result["mismatch_problem"] = driver.find_element(By.CSS_SELECTOR, ".problem").text
    shoot("reset-mismatch")
    fill(password, password)
    result["result_title"] = title()
    result["result_text"] = driver.find_element(By.TAG_NAME, "p").text
    shoot("reset-done")
    return result


def verify():
    result = {"page_title": title()}
    shoot("verify-page")
    submit()
    result["result_title"] = title()
    shoot("verify-done")
    return result


try:
    driver.get(link)
    print(json.dumps(reset(os.environ[sys.argv[4]]) if mode == "reset" else verify()))
finally:
    driver.quit()
