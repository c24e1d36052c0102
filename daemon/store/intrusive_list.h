// IntrusiveList: a doubly linked list threaded through a hook member of its elements, for the
// store's LRU lists (an entry sits in several lists at once without allocations). The list does
// not own its elements. Not thread-safe.
#ifndef KVTIER_DAEMON_STORE_INTRUSIVE_LIST_H_
#define KVTIER_DAEMON_STORE_INTRUSIVE_LIST_H_

#include <cstddef>

namespace kvtier::store {

template <typename T>
struct ListHook {
  T* prev = nullptr;
  T* next = nullptr;
  bool linked = false;
};

// Front = most recently used, back = least recently used.
template <typename T, ListHook<T> T::*Hook>
class IntrusiveList {
 public:
  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  T* front() const { return head_; }
  T* back() const { return tail_; }
  static T* Prev(T* item) { return (item->*Hook).prev; }  // towards the front
  static T* Next(T* item) { return (item->*Hook).next; }  // towards the back
  static bool Linked(const T* item) { return (item->*Hook).linked; }

  void PushFront(T* item) {
    ListHook<T>& h = item->*Hook;
    h.prev = nullptr;
    h.next = head_;
    h.linked = true;
    if (head_ != nullptr) (head_->*Hook).prev = item;
    head_ = item;
    if (tail_ == nullptr) tail_ = item;
    ++size_;
  }

  void Remove(T* item) {
    ListHook<T>& h = item->*Hook;
    if (!h.linked) return;
    if (h.prev != nullptr)
      (h.prev->*Hook).next = h.next;
    else
      head_ = h.next;
    if (h.next != nullptr)
      (h.next->*Hook).prev = h.prev;
    else
      tail_ = h.prev;
    h = ListHook<T>{};
    --size_;
  }

  void MoveToFront(T* item) {
    Remove(item);
    PushFront(item);
  }

  // To the least recently used end.
  void MoveToBack(T* item) {
    Remove(item);
    ListHook<T>& h = item->*Hook;
    h.prev = tail_;
    h.next = nullptr;
    h.linked = true;
    if (tail_ != nullptr) (tail_->*Hook).next = item;
    tail_ = item;
    if (head_ == nullptr) head_ = item;
    ++size_;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_INTRUSIVE_LIST_H_
