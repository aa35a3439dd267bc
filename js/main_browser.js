/*
 * main_browser.js — placeholder for the browser-parity host (issue 5). Not loaded yet.
 */
export {};
