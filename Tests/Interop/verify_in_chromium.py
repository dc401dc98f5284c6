#!/usr/bin/env python3
"""Follows an address-confirmation link in a real headless Chromium (Selenium + Debian's chromium-driver) and
presses the page's button, as a person would.

Usage: verify_in_chromium.py LINK SCREENSHOT_DIR
Prints one JSON object: {"page_title", "result_title"}; writes screenshots at a phone's and a desktop's width.
"""
import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

link, shots = sys.argv[1], sys.argv[2]
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


try:
    driver.get(link)
    result = {"page_title": driver.find_element(By.TAG_NAME, "h1").text}
    shoot("verify-page")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    result["result_title"] = driver.find_element(By.TAG_NAME, "h1").text
    shoot("verify-done")
    print(json.dumps(result))
finally:
    driver.quit()
