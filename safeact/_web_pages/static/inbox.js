// The inbox's live refresh: the server says when what waits changed (server-sent events),
// and the page fetches its lists again, drawn and escaped by the server, as on a reload.
// Lists that are already the version the server names are left alone: a link a person is
// about to click is not swapped for an equal one.
"use strict";
const lists = document.getElementById("lists");
if (lists !== null) {
  const title = document.querySelector("title").dataset.title;
  const source = new EventSource(lists.dataset.events);
  source.onmessage = async (message) => {
    const { version } = JSON.parse(message.data);
    if (document.getElementById("waiting").dataset.version === version) {
      return;
    }
    const response = await fetch(lists.dataset.fragment, { credentials: "same-origin" });
    if (response.redirected || response.status === 401) {
      window.location.assign("/signin");
      return;
    }
    if (!response.ok) {
      return;
    }
    lists.innerHTML = await response.text();
    const waiting = Number(document.getElementById("waiting").dataset.waiting);
    document.title = waiting > 0 ? `(${waiting}) ${title}` : title;
  };
  // A stream the server refused (the inbox restarted, which signs everyone out) is closed
  // for good by the browser: sign in again rather than show a list that no longer moves.
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      window.location.assign("/signin");
    }
  };
  source.addEventListener("expired", () => {
    source.close();
    window.location.assign("/signin");
  });
}
