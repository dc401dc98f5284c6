#!/usr/bin/env python3
"""Follows a password-reset link in a real headless Chromium (Selenium + Debian's chromium-driver) and fills the
broker's page as a person would: first two passwords that differ (the page must say so and keep the form),
then the new password twice.

Usage: reset_in_chromium.py LINK NEW_PASSWORD SCREENSHOT_DIR
The password comes from the environment variable named by NEW_PASSWORD (never on argv). Prints one JSON
object: {"form_title", "mismatch_problem", "result_title", "result_text"}; writes screenshots of each page at
a phone's width and a desktop's into SCREENSHOT_DIR.
"""
import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

link, password_variable, shots = sys.argv[1], sys.argv[2], sys.argv[3]
password = os.environ[password_variable]
options = webdriver.ChromeOptions()
for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                 "--disable-dev-shm-usage"]:
    options.add_argument(argument)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_page_load_timeout(60)


def shoot(name):
    for label, (width, height) in {"phone": (390, 844), "desktop": (1280, 800)}.items():
        driver.set_window_size(width, height)
        driver.save_screenshot(os.path.join(shots, f"{name}-{label}.png"))


def fill(first, second):
    driver.find_element(By.ID, "password").clear()
    driver.find_element(By.ID, "password").send_keys(first)
    driver.find_element(By.ID, "password_again").clear()
    driver.find_element(By.ID, "password_again").send_keys(second)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


try:
    driver.get(link)
    result = {"form_title": driver.find_element(By.TAG_NAME, "h1").text}
    shoot("reset-form")
    fill(password, password + " but different")
    result["mismatch_problem"] = driver.find_element(By.CSS_SELECTOR, ".problem").text
    shoot("reset-mismatch")
    fill(password, password)
    result["result_title"] = driver.find_element(By.TAG_NAME, "h1").text
    result["result_text"] = driver.find_element(By.TAG_NAME, "p").text
    shoot("reset-done")
    print(json.dumps(result))
finally:
    driver.quit()
