"""Headless Chromium for the page tests (Selenium + Debian's chromium and chromium-driver), and screenshots of
a page at a phone's width and a desktop's."""
import os

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def start():
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                     "--disable-dev-shm-usage"]:
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    return driver


def shoot(driver, directory, name):
    """Writes NAME-phone.png and NAME-desktop.png into DIRECTORY."""
    for label, (width, height) in {"phone": (390, 844), "desktop": (1280, 800)}.items():
        driver.set_window_size(width, height)
        driver.save_screenshot(os.path.join(directory, f"{name}-{label}.png"))
